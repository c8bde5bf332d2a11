"""aoti_torch_mps_{topk,sort,sort_stable,cumsum,_fused_rms_norm} against torch eager CPU.

Sort and top-k results must be exact (values and indices; the sort is stable, and top-k
inputs are drawn without ties so its indices are unique). cumsum: float32 1e-5 relative to
the running magnitude, float16 1e-2, bfloat16 2e-2 (elements are rounded to the result dtype,
sums kept in float32); integer results exact. RMSNorm: float32 1e-5, float16 1e-2,
bfloat16 2e-2 relative; rstd 1e-5 relative (float32 in every case)."""

import math

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails
from ops_testing import as_device, launch_shape, no_leaks_in_module  # noqa: F401 (fixtures)

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
DTYPE_CODE = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
              torch.float16: 5, torch.float32: 6, torch.bool: 11, torch.bfloat16: 15}


def results(code, *handles):
    assert code == 0, etmetal_py.last_error()
    return [Tensor(h[0]).torch() for h in handles]


def call_topk(x, k, dim, largest=True, sorted_=True):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    t = as_device(x)  # kept alive across the call
    code = lib.aoti_torch_mps_topk(t.handle, k, dim, int(largest), int(sorted_), r0, r1)
    return code, r0, r1


def call_sort(x, dim, descending=False, stable=None):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    t = as_device(x)
    if stable is None:
        code = lib.aoti_torch_mps_sort(t.handle, dim, int(descending), r0, r1)
    else:
        flag = ffi.new("int32_t*", int(stable)) if stable != "null" else ffi.NULL
        code = lib.aoti_torch_mps_sort_stable(t.handle, flag, dim, int(descending), r0, r1)
    return code, r0, r1


def call_cumsum(x, dim, dtype=None):
    r0 = ffi.new("AtenTensorHandle*")
    dtype_arg = ffi.new("int32_t*", DTYPE_CODE[dtype]) if dtype is not None else ffi.NULL
    t = as_device(x)
    return lib.aoti_torch_mps_cumsum(t.handle, dim, dtype_arg, r0), r0


def call_rms_norm(x, normalized_shape, weight=None, eps=None):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    w = as_device(weight) if weight is not None else None
    weight_arg = ffi.new("AtenTensorHandle*", w.handle) if w is not None else ffi.NULL
    eps_arg = ffi.new("double*", eps) if eps is not None else ffi.NULL
    t = as_device(x)
    code = lib.aoti_torch_mps__fused_rms_norm(
        t.handle, ffi.new("int64_t[]", list(normalized_shape)), len(normalized_shape),
        weight_arg, eps_arg, r0, r1)
    return code, r0, r1


def distinct_values(shape, dtype):
    """Values without ties (a permutation), exactly representable in `dtype`."""
    n = math.prod(shape)
    limit = {torch.float16: 2048, torch.bfloat16: 256, torch.int8: 256, torch.uint8: 256}.get(dtype)
    values = torch.randperm(n) if limit is None or n <= limit else torch.randint(0, limit, (n,))
    if dtype == torch.int8:
        values = values - 128
    return values.reshape(shape).to(dtype)


def with_ties(shape, dtype):
    return torch.randint(0, 5, shape).to(dtype) if dtype != torch.bool else torch.rand(shape) > 0.5


def expect_poisoned():
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()
    etmetal_py.synchronize()


# ----------------------------------------------------------------------------- sort


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [torch.bool])
@pytest.mark.parametrize("shape,dim", [((37,), 0), ((5, 100), 1), ((6, 17, 3), 1), ((4, 33), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_and_matches_torch(dtype, shape, dim, descending):
    torch.manual_seed(sum(shape) + dim)
    x = with_ties(shape, dtype)
    values, indices = results(*call_sort(x, dim, descending))
    expected_values, expected_indices = torch.sort(x, dim=dim, descending=descending, stable=True)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    assert torch.equal(values, expected_values)
    assert torch.equal(indices, expected_indices)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sort_orders_nan_like_torch(dtype):
    x = torch.tensor([3.0, float("nan"), -1.0, float("inf"), float("nan"), -float("inf"), 0.0, 3.0]).to(dtype)
    for descending in (False, True):
        values, indices = results(*call_sort(x, 0, descending))
        expected_values, expected_indices = torch.sort(x, descending=descending, stable=True)
        assert torch.equal(values.isnan(), expected_values.isnan())
        assert torch.equal(torch.nan_to_num(values), torch.nan_to_num(expected_values))
        assert torch.equal(indices, expected_indices)


@pytest.mark.parametrize("length", [1, 15, 16, 17, 31, 33, 255, 1000, 4099])
def test_sort_lengths_around_block_and_merge_widths(length):
    torch.manual_seed(length)
    x = torch.randn(2, length)
    values, indices = results(*call_sort(x, -1))
    expected_values, expected_indices = torch.sort(x, dim=-1, stable=True)
    assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)


# Lines longer than one threadgroup tile (2048 elements, 1024 for int64) sort tiles, then merge
# runs; the last merge writes the outputs (top-k with k > 256 keeps the first k).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("length", [1025, 2049, 5000])
def test_sort_of_lines_past_one_tile_with_ties(dtype, length):
    torch.manual_seed(length)
    x = with_ties((3, length), dtype)
    for descending in (False, True):
        values, indices = results(*call_sort(x, 1, descending))
        expected_values, expected_indices = torch.sort(x, dim=1, descending=descending, stable=True)
        assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)


def test_sort_of_long_strided_lines_with_nan_and_topk_past_the_radix_limit():
    torch.manual_seed(8)
    base = torch.randn(9000, 3)
    base[::37] = float("nan")
    base[5::41] = -0.0
    x = base[100:8100:2].t()  # lines of 4000 along dim 1, strided
    for descending in (False, True):
        values, indices = results(*call_sort(x, 1, descending))
        expected_values, expected_indices = torch.sort(x, dim=1, descending=descending, stable=True)
        assert torch.equal(values.isnan(), expected_values.isnan())
        assert torch.equal(torch.nan_to_num(values), torch.nan_to_num(expected_values))
        assert torch.equal(indices, expected_indices)
    for largest in (False, True):
        assert_topk_matches(x, 1000, 1, largest)
        assert_topk_matches(x.t(), 300, 0, largest)


def test_sort_of_strided_offset_view():
    torch.manual_seed(1)
    x = torch.randn(7, 40, 3)[2:, 5:35:2, 1].t()  # non-contiguous, storage offset
    assert x.storage_offset() > 0 and not x.is_contiguous()
    for dim in (0, 1, -1):
        values, indices = results(*call_sort(x, dim, descending=True, stable=True))
        expected_values, expected_indices = torch.sort(x, dim=dim, descending=True, stable=True)
        assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)
        assert values.is_contiguous() and indices.is_contiguous()


@pytest.mark.parametrize("stable", [True, False, "null"])
def test_sort_stable_entry_point(stable):
    x = torch.randint(0, 3, (9, 20)).float()
    values, indices = results(*call_sort(x, 1, True, stable=stable))
    expected_values, expected_indices = torch.sort(x, dim=1, descending=True, stable=True)
    assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)


def test_sort_scalar_and_empty():
    values, indices = results(*call_sort(torch.tensor(2.5), 0))
    assert values.shape == () and values.item() == 2.5 and indices.item() == 0
    values, indices = results(*call_sort(torch.empty(3, 0), 1))
    assert values.shape == (3, 0) and indices.shape == (3, 0)


# ----------------------------------------------------------------------------- topk


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
@pytest.mark.parametrize("shape,k,dim", [((50,), 7, 0), ((3, 64), 64, 1), ((9, 20, 4), 5, 1),
                                         ((130, 3), 1, 0), ((2, 300), 0, -1)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(dtype, shape, k, dim, largest):
    torch.manual_seed(k + sum(shape))
    x = distinct_values(shape, dtype)  # narrow dtypes may still hold ties in long inputs
    values, indices = results(*call_topk(x, k, dim, largest))
    expected_values, expected_indices = torch.topk(x, k, dim=dim, largest=largest, sorted=True)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    assert torch.equal(values, expected_values)
    # the indices point at the values, whatever order torch gives equal values
    assert torch.equal(torch.gather(x, dim if dim >= 0 else x.dim() + dim, indices), values)
    if len(torch.unique(x)) == x.numel():
        assert torch.equal(indices, expected_indices)


def test_topk_nan_counts_as_largest():
    x = torch.tensor([1.0, float("nan"), 5.0, -2.0, float("nan")])
    values, indices = results(*call_topk(x, 3, 0, largest=True))
    assert values[:2].isnan().all() and values[2] == 5.0 and indices.tolist() == [1, 4, 2]
    values, indices = results(*call_topk(x, 2, 0, largest=False))
    assert values.tolist() == [-2.0, 1.0] and indices.tolist() == [3, 0]


def test_topk_unsorted_flag_and_views():
    torch.manual_seed(4)
    x = torch.randn(10, 50)[1::3, ::2]
    values, indices = results(*call_topk(x, 4, 1, largest=True, sorted_=False))
    expected = torch.topk(x, 4, dim=1)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)


def stable_topk(x, k, dim, largest):
    """torch's order with ties in index order: the first k of a stable sort (NaN largest)."""
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)


def assert_topk_matches(x, k, dim, largest):
    values, indices = results(*call_topk(x, k, dim, largest))
    expected_values, expected_indices = stable_topk(x, k, dim, largest)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    if x.dtype.is_floating_point:
        assert torch.equal(values.isnan(), expected_values.isnan())
        values, expected_values = torch.nan_to_num(values), torch.nan_to_num(expected_values)
    assert torch.equal(values, expected_values)
    assert torch.equal(indices, expected_indices)


# Radix selection (k <= 256): lines of one chunk (2048 elements with the CPU device's launch
# shape; with the GPU shape chunks grow with k, to 8192), of several chunks, and of so many
# chunks that their candidates take a second chunk pass; heavy ties pick the lowest indices
# first.
@pytest.mark.parametrize("dtype,shape,k,dim",
                         [(dtype, (2, 5000), 50, -1) for dtype in FLOATS + INTEGERS + [torch.bool]] +
                         [(dtype, shape, k, dim) for dtype in (torch.float32, torch.int64)
                          for shape, k, dim in [((3, 700), 13, 1), ((2, 2049), 256, 1), ((5000, 2), 7, 0)]])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_ties_takes_lowest_indices(dtype, shape, k, dim, largest, launch_shape):
    torch.manual_seed(k + sum(shape))
    assert_topk_matches(with_ties(shape, dtype), k, dim, largest)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16])
def test_topk_two_chunk_passes(dtype, launch_shape):
    torch.manual_seed(3)
    # Chunks of 2048 (CPU shape) to 8192 elements (GPU shape, float32 and float16; 5120 for
    # int64): 37 to 147 chunks x 256 candidates > one chunk, so at least two chunk passes.
    x = torch.randn(2, 300000).mul(1000).to(dtype)
    for largest in (True, False):
        assert_topk_matches(x, 256, 1, largest)


@pytest.mark.parametrize("dtype", FLOATS)
def test_topk_nan_infinities_and_signed_zeros(dtype, launch_shape):
    torch.manual_seed(5)
    x = torch.randn(3, 4100)
    x[:, ::97] = float("nan")
    x[:, 5::89] = float("inf")
    x[:, 7::83] = -float("inf")
    x[:, 11::13] = 0.0
    x[:, 12::13] = -0.0
    x = x.to(dtype)
    for largest in (True, False):
        for k in (1, 30, 100, 256):
            assert_topk_matches(x, k, 1, largest)
    zeros = torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0]).to(dtype)
    values, indices = results(*call_topk(zeros, 3, 0, largest=False))
    assert indices.tolist() == [0, 1, 3]  # -0.0 and 0.0 tie: index order


@pytest.mark.parametrize("k", [0, 1, 255, 256, 257, 300])
def test_topk_k_from_zero_to_length_and_past_the_radix_limit(k):
    torch.manual_seed(k)
    x = torch.randn(4, 300)
    assert_topk_matches(x, k, 1, True)
    assert_topk_matches(x, k, 1, False)


def test_topk_of_strided_offset_views_and_scalars():
    torch.manual_seed(6)
    base = torch.randn(6, 9000)
    for x, dim in [(base[1:5, 3::2], 1), (base[:, 100:4100].t(), 0), (base.t()[::3], 0), (base[2, 7::4], 0)]:
        assert not x.is_contiguous()
        assert_topk_matches(x, 20, dim, True)
        assert_topk_matches(x, 20, dim, False)
    values, indices = results(*call_topk(torch.tensor(1.5), 1, 0))
    assert values.shape == () and values.item() == 1.5 and indices.item() == 0
    values, indices = results(*call_topk(torch.empty(0, 40), 5, 1))
    assert values.shape == (0, 5) and indices.shape == (0, 5)


# ----------------------------------------------------------------------------- cumsum


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,dim", [((1000,), 0), ((3, 5000), 1), ((70, 6), 0), ((4, 9, 2), 1),
                                       ((5, 300), -1)])
def test_cumsum_floats(dtype, shape, dim):
    torch.manual_seed(sum(shape))
    x = torch.randn(shape).to(dtype)
    code, r0 = call_cumsum(x, dim)
    (out,) = results(code, r0)
    expected = torch.cumsum(x.double(), dim=dim)
    assert out.dtype == dtype and out.shape == x.shape
    bound = torch.cumsum(x.double().abs(), dim=dim)
    relative = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
    assert ((out.double() - expected).abs() <= relative * bound + 1e-6).all()


@pytest.mark.parametrize("dtype", INTEGERS + [torch.bool])
@pytest.mark.parametrize("out_dtype", [None, torch.int64, torch.int32, torch.float32])
def test_cumsum_integers_and_dtype_override(dtype, out_dtype):
    torch.manual_seed(2)
    x = with_ties((6, 700), dtype) if dtype != torch.bool else torch.rand(6, 700) > 0.5
    code, r0 = call_cumsum(x, 1, out_dtype)
    (out,) = results(code, r0)
    expected = torch.cumsum(x, dim=1, dtype=out_dtype)
    assert out.dtype == expected.dtype  # int64 by default for integer and bool inputs
    assert torch.equal(out, expected)


def test_cumsum_int64_wraps_like_torch():
    x = torch.tensor([2**62, 2**62, 2**62, -5], dtype=torch.int64)
    (out,) = results(*call_cumsum(x, 0))
    assert torch.equal(out, torch.cumsum(x, 0))
    x = torch.tensor([2**30, 2**30, 2**30], dtype=torch.int32)
    (out,) = results(*call_cumsum(x, 0, torch.int32))
    assert torch.equal(out, torch.cumsum(x, 0, dtype=torch.int32))


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cumsum_float_override_rounds_elements_first(out_dtype):
    torch.manual_seed(8)
    x = torch.randn(4, 50)
    (out,) = results(*call_cumsum(x, 1, out_dtype))
    expected = torch.cumsum(x.to(out_dtype).double(), dim=1)
    relative = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[out_dtype]
    assert out.dtype == out_dtype
    assert ((out.double() - expected).abs() <= relative * torch.cumsum(x.abs().double(), 1) + 1e-6).all()


# With the GPU launch shape, lines of >= 1024 elements take the one-pass kernel (a threadgroup
# per line, blocks of 4096): the boundary, a whole block, a one-element tail, several blocks.
# The CPU device's shape scans them in chunks. The tests of long lines run with both.
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1024,), (2, 4096), (3, 4097), (2, 9000)])
def test_cumsum_long_lines(dtype, shape, launch_shape):
    torch.manual_seed(shape[-1])
    x = torch.randn(shape).to(dtype)
    (out,) = results(*call_cumsum(x, -1))
    expected = torch.cumsum(x.double(), dim=-1)
    relative = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
    assert out.dtype == dtype
    assert ((out.double() - expected).abs() <= relative * torch.cumsum(x.double().abs(), -1) + 1e-6).all()


def test_cumsum_long_lines_of_views_integers_and_non_finite_values(launch_shape):
    torch.manual_seed(9)
    x = torch.randn(3000, 4)[:, 1:3]  # scanned along a stride-4 dimension, storage offset 1
    (out,) = results(*call_cumsum(x, 0))
    torch.testing.assert_close(out, torch.cumsum(x.double(), 0).float(), rtol=1e-5, atol=1e-3)
    ints = torch.randint(-100, 100, (2, 3000), dtype=torch.int32)
    (out,) = results(*call_cumsum(ints, 1, torch.float32))
    assert torch.equal(out, torch.cumsum(ints, 1, dtype=torch.float32))  # exact: small integers
    special = torch.randn(2500)
    special[100], special[2200] = float("inf"), float("nan")
    (out,) = results(*call_cumsum(special, 0))
    expected = torch.cumsum(special.double(), 0).float()
    assert torch.isinf(out[100:2200]).all() and torch.isnan(out[2200:]).all()
    torch.testing.assert_close(out[:100], expected[:100], rtol=1e-5, atol=1e-4)


# Integer results of long lines take the one-pass kernel too (GPU shape), summing in wrapping
# 64-bit integers across lanes, simdgroups and blocks, or the chunks (CPU shape): exact,
# wrap-around included.
# (the first two by default: each case compiles a kernel of its own)
@pytest.mark.parametrize("dtype, out_dtype", [(torch.int64, None), (torch.int32, None)] + [
    pytest.param(*case, marks=pytest.mark.slow)
    for case in ((torch.int32, torch.int32), (torch.uint8, torch.int64), (torch.bool, None),
                 (torch.int16, torch.int32))])
def test_cumsum_long_integer_lines_are_exact(dtype, out_dtype, launch_shape):
    generator = torch.Generator().manual_seed(10)
    if dtype == torch.bool:
        x = torch.rand(3, 9000, generator=generator) > 0.5
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(info.min, info.max, (3, 9000), generator=generator, dtype=dtype)
    if dtype == torch.int64:
        x[:, ::7] = 2**62  # the running sum wraps many times
    for line in (x, x[:, 1:1025], x[:, :4097], x.t().contiguous().t()):
        (out,) = results(*call_cumsum(line, 1, out_dtype))
        expected = torch.cumsum(line, 1, dtype=out_dtype)
        assert out.dtype == expected.dtype and torch.equal(out, expected)
    view = x.t()[5:4000:3]  # scanned along dim 0 of a transposed, offset, strided view
    (out,) = results(*call_cumsum(view, 0, out_dtype))
    assert torch.equal(out, torch.cumsum(view, 0, dtype=out_dtype))


def test_cumsum_of_strided_offset_view():
    torch.manual_seed(6)
    x = torch.randn(8, 600, 3)[1:, 50::2, 2]
    for dim in (0, 1):
        (out,) = results(*call_cumsum(x, dim))
        torch.testing.assert_close(out, torch.cumsum(x, dim), rtol=1e-5, atol=1e-4)
        assert out.is_contiguous()


def test_cumsum_scalar_and_empty():
    (out,) = results(*call_cumsum(torch.tensor(3.5), 0))
    assert out.shape == () and out.item() == 3.5
    (out,) = results(*call_cumsum(torch.empty(0, 4, dtype=torch.int32), 0))
    assert out.shape == (0, 4) and out.dtype == torch.int64


# ---------------------------------------------------------------------------- rms norm


def rms_reference(x, normalized_shape, weight, eps):
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(dim=dims, keepdim=True) + eps)
    out = xd * rstd
    if weight is not None:
        out = out * weight.double()
    return out, rstd


RMS_TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,normalized", [((4, 64), 1), ((2, 3, 129), 1), ((5, 6, 7), 2),
                                              ((1, 4096), 1), ((3, 1, 1), 2)])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_matches_torch(dtype, shape, normalized, with_weight):
    torch.manual_seed(sum(shape))
    x = torch.randn(shape).to(dtype)
    normalized_shape = shape[len(shape) - normalized:]
    weight = torch.randn(normalized_shape).to(dtype) if with_weight else None
    out, rstd = results(*call_rms_norm(x, normalized_shape, weight, 1e-6))
    ref_out, ref_rstd = rms_reference(x, normalized_shape, weight, 1e-6)
    torch_out, torch_rstd = torch.ops.aten._fused_rms_norm(x, list(normalized_shape), weight, 1e-6)
    assert out.dtype == dtype and rstd.dtype == torch.float32
    assert out.shape == torch_out.shape and rstd.shape == torch_rstd.shape
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-5, atol=0)
    tolerance = RMS_TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), ref_out, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_default_eps_is_float32_epsilon(dtype):
    # Tiny inputs make eps dominate; ATen uses float32's epsilon for every dtype.
    x = (torch.randn(3, 8) * 1e-4).to(dtype)
    out, rstd = results(*call_rms_norm(x, (8,)))
    torch_out, torch_rstd = torch.ops.aten._fused_rms_norm(x, [8], None, None)
    torch.testing.assert_close(rstd, torch_rstd, rtol=1e-5, atol=0)
    torch.testing.assert_close(out.float(), torch_out.float(), rtol=RMS_TOLERANCE[dtype], atol=1e-3)


def test_rms_norm_views():
    torch.manual_seed(12)
    x = torch.randn(6, 10, 32)[1:, ::3, :].transpose(0, 1)  # strided rows, offset
    weight = torch.randn(2, 32)[1]  # a weight with a storage offset
    out, rstd = results(*call_rms_norm(x, (32,), weight, 1e-5))
    ref_out, ref_rstd = rms_reference(x, (32,), weight, 1e-5)
    torch.testing.assert_close(out.double(), ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-5, atol=0)
    # two normalized dims that do not merge into one run of memory
    y = torch.randn(4, 6, 10)[:, :, 1:9]
    out, rstd = results(*call_rms_norm(y, (6, 8)))
    ref_out, ref_rstd = rms_reference(y, (6, 8), None, torch.finfo(torch.float32).eps)
    torch.testing.assert_close(out.double(), ref_out, rtol=1e-5, atol=1e-5)
    assert rstd.shape == (4, 1, 1)


@pytest.mark.parametrize("shape", [
    (2, 20_000),   # longer than a group's registers hold: the row is streamed twice
    (301, 40),     # several rows per threadgroup, a partial last block of rows
    (17, 4099),    # many-row element count per thread, ragged runs at the row's end
])
def test_rms_norm_long_rows_and_row_blocks(shape):
    torch.manual_seed(shape[0])
    x = torch.randn(shape)
    weight = torch.randn(shape[-1])
    out, rstd = results(*call_rms_norm(x, shape[-1:], weight, 1e-6))
    ref_out, ref_rstd = rms_reference(x, shape[-1:], weight, 1e-6)
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-5, atol=0)
    torch.testing.assert_close(out.double(), ref_out, rtol=1e-5, atol=1e-5)


def test_rms_norm_empty_rows_give_nan_rstd():
    out, rstd = results(*call_rms_norm(torch.empty(3, 0), (0,)))
    assert out.shape == (3, 0) and rstd.shape == (3, 1) and rstd.isnan().all()


# ------------------------------------------------------------------------- bad inputs


def test_bad_arguments():
    x = torch.randn(4, 5)
    fails(call_topk(x, 6, 1)[0], "topk", "k = 6")
    expect_poisoned()
    fails(call_topk(x, 2, 2)[0], "topk", "dim 2")
    expect_poisoned()
    fails(call_sort(x, -3)[0], "sort", "dim -3")
    expect_poisoned()
    fails(call_sort(torch.randn(2, 2).double(), 0)[0], "sort", "float64")
    expect_poisoned()
    float64 = ffi.new("int32_t*", 7)  # not in DTYPE_CODE: no float64 tensors on the device
    device_x = as_device(x)
    fails(lib.aoti_torch_mps_cumsum(device_x.handle, 0, float64, ffi.new("AtenTensorHandle*")),
          "cumsum", "float32 input to float64 output")
    expect_poisoned()
    fails(call_cumsum(x, 5)[0], "cumsum", "dim 5")
    expect_poisoned()
    fails(call_rms_norm(x, (4,))[0], "_fused_rms_norm", "normalized_shape")
    expect_poisoned()
    fails(call_rms_norm(x, (5,), torch.randn(5).half())[0], "_fused_rms_norm", "weight dtype")
    expect_poisoned()
    fails(call_rms_norm(x.to(torch.int32), (5,))[0], "_fused_rms_norm", "int32")
    expect_poisoned()
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    fails(lib.aoti_torch_mps_topk(t.handle, 1, 0, 1, 1, r0, ffi.NULL), "ret1")
    expect_poisoned()
    fails(lib.aoti_torch_mps_cumsum(ffi.NULL, 0, ffi.NULL, r0), "null tensor handle")
    expect_poisoned()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("length", [10_000, 65_537])
def test_long_lines(dtype, length):
    torch.manual_seed(length)
    x = torch.randn(3, length).mul(1000).to(dtype)
    values, indices = results(*call_sort(x, 1))
    expected_values, expected_indices = torch.sort(x, dim=1, stable=True)
    assert torch.equal(values, expected_values) and torch.equal(indices, expected_indices)
    values, _ = results(*call_topk(x, 100, 1))
    assert torch.equal(values, torch.topk(x, 100, dim=1).values)
    if dtype in FLOATS:
        y = torch.randn(3, length).to(dtype)  # sums stay inside float16's range
        (out,) = results(*call_cumsum(y, 1))
        bound = torch.cumsum(y.double().abs(), 1)
        relative = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}[dtype]
        assert ((out.double() - torch.cumsum(y.double(), 1)).abs() <= relative * bound + 1e-3).all()
