"""aoti_torch_mps_searchsorted_Tensor / _Scalar and bucketize_Tensor against torch eager:
dtypes, left/right/side, 1-D and row-wise sequences, sorters, strided views, empty and 0-dim
values, NaN, mixed dtypes, and bad input."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8]


def _handle_ptr(tensor):
    return ffi.new("AtenTensorHandle*", tensor.handle) if tensor is not None else ffi.NULL


def call_searchsorted(sequence, values, out_int32=False, right=False, side=None, sorter=None):
    r0 = ffi.new("AtenTensorHandle*")
    s, v = as_device(sequence), as_device(values)
    srt = as_device(sorter) if sorter is not None else None
    side_text = ffi.new("char[]", side.encode()) if side is not None else None
    side_arg = ffi.new("const char**", side_text) if side is not None else ffi.NULL
    code = lib.aoti_torch_mps_searchsorted_Tensor(s.handle, v.handle, int(out_int32), int(right),
                                                 side_arg, _handle_ptr(srt), r0)
    return code, r0


def result(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def sample(dtype, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    low = 0 if dtype == torch.uint8 else -20
    return torch.randint(low, 20, shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("right", [False, True])
def test_1d_sequence_matches_torch(dtype, right):
    sequence = sample(dtype, (33,), 1).sort().values
    values = torch.cat([sample(dtype, (5, 7), 2).view(-1), sequence[::4]]).view(4, -1)  # with ties
    for out_int32 in (False, True):
        out = result(*call_searchsorted(sequence, values, out_int32, right))
        assert torch.equal(out, torch.searchsorted(sequence, values, out_int32=out_int32, right=right))
        bucket = ffi.new("AtenTensorHandle*")
        s, v = as_device(sequence), as_device(values)
        code = lib.aoti_torch_mps_bucketize_Tensor(v.handle, s.handle, int(out_int32), int(right), bucket)
        assert torch.equal(result(code, bucket), torch.bucketize(values, sequence, out_int32=out_int32, right=right))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16], ids=str)
def test_row_wise_sequences_sorters_and_side(dtype):
    raw = sample(dtype, (2, 3, 40), 3)
    sequence = raw.sort(-1).values
    values = sample(dtype, (2, 3, 9), 4)
    for side in ("left", "right"):
        out = result(*call_searchsorted(sequence, values, side=side))
        assert torch.equal(out, torch.searchsorted(sequence, values, side=side))
    sorter = raw.argsort(-1)
    out = result(*call_searchsorted(raw, values, right=True, sorter=sorter))
    assert torch.equal(out, torch.searchsorted(raw, values, right=True, sorter=sorter))


def test_strided_views_empty_0_dim_nan_and_mixed_dtypes():
    base = torch.randn(50, 6).sort(0).values
    sequence = base[::3, 2]                       # a strided, offset 1-D view
    values = torch.randn(8, 10).t()[:, 1:]         # transposed view
    assert torch.equal(result(*call_searchsorted(sequence, values)), torch.searchsorted(sequence, values))
    empty = torch.empty(0, 4)
    assert torch.equal(result(*call_searchsorted(sequence, empty)), torch.searchsorted(sequence, empty))
    scalar_tensor = torch.tensor(0.1)
    assert torch.equal(result(*call_searchsorted(sequence, scalar_tensor)), torch.searchsorted(sequence, scalar_tensor))
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    for right in (False, True):
        assert torch.equal(result(*call_searchsorted(sequence, special, right=right)),
                           torch.searchsorted(sequence, special, right=right))
    ints = torch.tensor([1, 2, 2, 3, 7])
    fractional = torch.tensor([1.5, 2.0, 2.5, -1.0, 9.0])
    assert torch.equal(result(*call_searchsorted(ints, fractional)), torch.searchsorted(ints, fractional))
    assert torch.equal(result(*call_searchsorted(fractional.sort().values, ints)),
                       torch.searchsorted(fractional.sort().values, ints))


@pytest.mark.parametrize("sequence", [torch.tensor([1, 2, 2, 3, 7]), torch.tensor([0.5, 1.0, 1.0, 2.5]),
                                      torch.tensor([0.5, 1.0, 1.0, 2.5], dtype=torch.float16)], ids=str)
@pytest.mark.parametrize("value", [2.0, 2.5, -3.0, 100.0, 1.0, 0.7])
@pytest.mark.parametrize("right", [False, True])
def test_scalar_matches_torch(sequence, value, right):
    r0 = ffi.new("AtenTensorHandle*")
    s = as_device(sequence)
    code = lib.aoti_torch_mps_searchsorted_Scalar(s.handle, value, 0, int(right), ffi.NULL, ffi.NULL, r0)
    out = result(code, r0)
    assert out.shape == () and torch.equal(out, torch.searchsorted(sequence, value, right=right))


def test_bad_input():
    sequence, values = torch.arange(5.0), torch.rand(3)
    side = ffi.new("char[]", b"left")
    side_arg = ffi.new("const char**", side)
    s, v = as_device(sequence), as_device(values)
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_searchsorted_Tensor(s.handle, v.handle, 0, 1, side_arg, ffi.NULL, r0),
                      "side and right can't be set to opposites")
    poisoning_failure(call_searchsorted(torch.arange(6.0).view(2, 3), torch.rand(3, 2))[0],
                      "first N-1 dimensions")
    poisoning_failure(call_searchsorted(sequence, values, sorter=torch.zeros(5, dtype=torch.int32))[0],
                      "sorter must be a tensor of long dtype")
    poisoning_failure(call_searchsorted(torch.tensor([True, False]), torch.tensor([True]))[0],
                      "dtype bool is not supported")
    m = as_device(torch.arange(6.0).view(2, 3))
    poisoning_failure(lib.aoti_torch_mps_searchsorted_Scalar(m.handle, 1.0, 0, 0, ffi.NULL, ffi.NULL, r0),
                      "scalar only when boundaries tensor dimension is 1")
    poisoning_failure(lib.aoti_torch_mps_bucketize_Tensor(v.handle, m.handle, 0, 0, r0), "must be 1 dimension")
    poisoning_failure(lib.aoti_torch_mps_searchsorted_Tensor(ffi.NULL, v.handle, 0, 0, ffi.NULL, ffi.NULL, r0),
                      "aoti_torch_mps_searchsorted_Tensor")
    # An out-of-range sorter entry is known only once the kernel ran.
    code, r0 = call_searchsorted(sequence, values, sorter=torch.tensor([0, 1, 9, 3, 4]))
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="sorter index out of range"):
        etmetal_py.synchronize()
