"""aoti_torch_mps_nonzero, _nonzero_static, _masked_select, _masked_scatter and _repeat_interleave_Tensor against
torch eager:
dtypes, strided views, empty and 0-dim inputs, NaN, more than one chunk of elements, and bad
input (including the data-dependent errors reported by the stream)."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def output(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def nonzero(x):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return lib.aoti_torch_mps_nonzero(t.handle, r0), r0


def nonzero_static(x, size, fill_value):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return lib.aoti_torch_mps_nonzero_static(t.handle, size, fill_value, r0), r0


def repeat_interleave(repeats, output_size=None):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(repeats)
    size = ffi.new("int64_t*", output_size) if output_size is not None else ffi.NULL
    return lib.aoti_torch_mps_repeat_interleave_Tensor(t.handle, size, r0), r0


def sparse_sample(dtype, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=generator) > 0.6
    values = torch.randint(1, 5, shape, generator=generator)
    return (values * mask).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero_matches_torch(dtype):
    for shape in [(7, 9), (3, 4, 500), (2500,)]:  # 2500 elements span three chunks
        x = sparse_sample(dtype, shape, len(shape))
        out = output(*nonzero(x))
        assert out.dtype == torch.int64 and torch.equal(out, torch.nonzero(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("size, fill_value", [(0, -1), (5, -1), (40, 7), (3000, -1)])
def test_nonzero_static_matches_torch(dtype, size, fill_value):
    x = sparse_sample(dtype, (30, 70), 9)
    out = output(*nonzero_static(x, size, fill_value))
    assert torch.equal(out, torch.nonzero_static(x, size=size, fill_value=fill_value))


def test_nonzero_views_nan_empty_0_dim():
    base = sparse_sample(torch.float32, (40, 30), 3)
    base[3, 4] = float("nan")
    for view in (base.t(), base[1::3, 2:], base[:, 4]):
        assert torch.equal(output(*nonzero(view)), torch.nonzero(view))
    for x in (torch.empty(0, 3), torch.tensor(2.0), torch.tensor(0.0), torch.zeros(5, 5)):
        out = output(*nonzero(x))
        assert out.shape == torch.nonzero(x).shape and torch.equal(out, torch.nonzero(x))
        static = output(*nonzero_static(x, 4, -1))
        assert torch.equal(static, torch.nonzero_static(x, size=4, fill_value=-1))


def test_many_blocks():
    # 1.5 M elements: 184 blocks of 8,192 (one threadgroup each), their rows far past 2^16.
    # (repeat_interleave's test crosses the scan's tile of 1,024 counts.)
    generator = torch.Generator().manual_seed(12)
    x = (torch.rand(3, 500_000, generator=generator) < 0.3).to(torch.uint8)
    assert torch.equal(output(*nonzero(x)), torch.nonzero(x))
    strided = x.t()[::2]  # every other column, as rows: a non-contiguous view
    assert torch.equal(output(*nonzero(strided)), torch.nonzero(strided))
    values = torch.arange(1_500_000, dtype=torch.int32).view(3, 500_000)
    mask = x.bool()
    assert torch.equal(output(*masked_select(values, mask)), torch.masked_select(values, mask))


def masked_select(x, mask):
    r0 = ffi.new("AtenTensorHandle*")
    t, m = as_device(x), as_device(mask)
    return lib.aoti_torch_mps_masked_select(t.handle, m.handle, r0), r0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_select_matches_torch(dtype):
    generator = torch.Generator().manual_seed(5)
    x = sparse_sample(dtype, (6, 500), 6)
    mask = torch.rand(6, 500, generator=generator) > 0.5
    assert torch.equal(output(*masked_select(x, mask)), torch.masked_select(x, mask))
    row_mask = torch.rand(500, generator=generator) > 0.5   # broadcast over rows
    assert torch.equal(output(*masked_select(x, row_mask)), torch.masked_select(x, row_mask))
    column = x[:, :1]                                          # self broadcast over the mask
    assert torch.equal(output(*masked_select(column, mask)), torch.masked_select(column, mask))


def test_masked_select_views_empty_0_dim_and_bad_input():
    x = torch.randn(20, 30)
    mask = torch.randn(30, 20) > 0
    assert torch.equal(output(*masked_select(x.t()[::2], mask[::2])), torch.masked_select(x.t()[::2], mask[::2]))
    for a, m in ((torch.empty(0, 3), torch.ones(3, dtype=torch.bool)), (torch.tensor(1.5), torch.tensor(True)),
                 (torch.tensor(1.5), torch.zeros(4, dtype=torch.bool))):
        assert torch.equal(output(*masked_select(a, m)), torch.masked_select(a, m))
    poisoning_failure(masked_select(x, torch.ones(20, 30, dtype=torch.uint8))[0], "expected BoolTensor for mask")
    poisoning_failure(masked_select(x, torch.ones(7, dtype=torch.bool))[0], "must match the size")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
def test_repeat_interleave_matches_torch(dtype):
    repeats = torch.randint(0, 4, (3000,), generator=torch.Generator().manual_seed(4), dtype=dtype)
    expected = torch.repeat_interleave(repeats)
    out = output(*repeat_interleave(repeats))
    assert out.dtype == dtype and torch.equal(out, expected)
    out = output(*repeat_interleave(repeats, int(repeats.sum())))
    assert torch.equal(out, expected)
    strided = repeats[5::7]
    assert torch.equal(output(*repeat_interleave(strided)), torch.repeat_interleave(strided))
    empty = torch.empty(0, dtype=dtype)
    assert torch.equal(output(*repeat_interleave(empty)), torch.repeat_interleave(empty))
    many = torch.randint(0, 3, (70_000,), generator=torch.Generator().manual_seed(6), dtype=dtype)
    # 1,094 chunks of 64: more than the scan's tile of 1,024 counts.
    assert torch.equal(output(*repeat_interleave(many)), torch.repeat_interleave(many))
    zeros = torch.zeros(6, dtype=dtype)
    assert torch.equal(output(*repeat_interleave(zeros, 0)), torch.repeat_interleave(zeros, output_size=0))


def test_bad_input():
    poisoning_failure(nonzero_static(torch.ones(3), -1, 0)[0], "aoti_torch_mps_nonzero_static",
                      "'size' must be an non-negative integer")
    poisoning_failure(repeat_interleave(torch.ones(2, 2, dtype=torch.int64))[0], "repeats must be a 1-D tensor")
    poisoning_failure(repeat_interleave(torch.ones(3))[0], "repeats has to be Long or Int tensor")
    poisoning_failure(repeat_interleave(torch.tensor([1, -2, 3]))[0], "repeats can not be negative")
    poisoning_failure(lib.aoti_torch_mps_nonzero(ffi.NULL, ffi.new("AtenTensorHandle*")), "aoti_torch_mps_nonzero")
    with pytest.raises(RuntimeError):
        torch.repeat_interleave(torch.tensor([1, 2]), output_size=5)
    # Known only once the kernels ran: reported by the stream.
    for repeats, size, message in ((torch.tensor([1, 2]), 5, "allocated size does not match required size"),
                                   (torch.tensor([1, -1, 3]), 4, "repeats can not be negative")):
        code, r0 = repeat_interleave(repeats, size)
        assert code == 0
        Tensor(r0[0]).delete()
        with pytest.raises(etmetal_py.EtmetalError, match=message):
            etmetal_py.synchronize()


def masked_scatter(x, mask, source):
    r0 = ffi.new("AtenTensorHandle*")
    t, m, s = as_device(x), as_device(mask), as_device(source)
    return lib.aoti_torch_mps_masked_scatter(t.handle, m.handle, s.handle, r0), r0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_scatter_matches_torch(dtype):
    generator = torch.Generator().manual_seed(8)
    x = sparse_sample(dtype, (5, 700), 9)
    mask = torch.rand(5, 700, generator=generator) > 0.5
    source = sparse_sample(dtype, (2, 1800), 10)            # more elements than needed
    assert torch.equal(output(*masked_scatter(x, mask, source)), x.masked_scatter(mask, source))
    row_mask = torch.rand(700, generator=generator) > 0.5   # the mask broadcast over rows
    assert torch.equal(output(*masked_scatter(x, row_mask, source)), x.masked_scatter(row_mask, source))


def test_masked_scatter_broadcast_views_and_bad_input():
    x, mask = torch.zeros(2, 1), torch.tensor([True, False, True])   # self broadcast too
    source = torch.arange(9.0).view(3, 3).t()                           # a strided source
    assert torch.equal(output(*masked_scatter(x, mask, source)), x.masked_scatter(mask, source))
    base = torch.randn(30, 20)
    view, view_mask = base.t()[::2], torch.randn(20, 30)[::2] > 0
    assert torch.equal(output(*masked_scatter(view, view_mask, base)), view.masked_scatter(view_mask, base))
    empty = torch.empty(0, 3)
    assert output(*masked_scatter(empty, torch.ones(3, dtype=torch.bool), torch.empty(0))).shape == (0, 3)
    poisoning_failure(masked_scatter(x, mask, source.half())[0], "aoti_torch_mps_masked_scatter",
                      "expected self and source to have same dtypes")
    poisoning_failure(masked_scatter(x, mask.to(torch.uint8), source)[0], "expected BoolTensor for mask")
    code, r0 = masked_scatter(torch.zeros(4), torch.ones(4, dtype=torch.bool), torch.ones(2))
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match="Number of elements of source < number of ones in mask"):
        etmetal_py.synchronize()
