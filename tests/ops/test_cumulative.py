"""aoti_torch_mps_cumprod, _cummax, _cummin and _logcumsumexp against torch eager: dtypes,
dims (negative too), strided views, empty and 0-dim inputs, NaN and infinities, dtype
overrides, and bad input."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, launch_shape, no_leaks_in_module, poisoning_failure  # noqa: F401

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
DTYPE_CODE = {torch.float32: 6, torch.float16: 5, torch.bfloat16: 15, torch.int64: 4, torch.int32: 3}
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def outputs(code, *handles):
    assert code == 0, etmetal_py.last_error()
    return [Tensor(h[0]).torch() for h in handles]


def cumprod(x, dim, dtype=None):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    dtype_arg = ffi.new("int32_t*", DTYPE_CODE[dtype]) if dtype is not None else ffi.NULL
    return lib.aoti_torch_mps_cumprod(t.handle, dim, dtype_arg, r0), r0


def extreme(x, dim, function):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return function(t.handle, dim, r0, r1), r0, r1


def logcumsumexp(x, dim):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return lib.aoti_torch_mps_logcumsumexp(t.handle, dim, r0), r0


def sample(dtype, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=generator) * 0.8 + 0.6).to(dtype)  # products stay moderate
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.3
    return torch.randint(0 if dtype == torch.uint8 else -3, 4, shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod_floats(dtype, dim):
    x = sample(dtype, (6, 40, 3), 1)
    (out,) = outputs(*cumprod(x, dim))
    expected = torch.cumprod(x.double(), dim)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), expected, rtol=TOLERANCE[dtype] * 4, atol=1e-6)


@pytest.mark.parametrize("dtype", INTEGERS + [torch.bool], ids=str)
@pytest.mark.parametrize("out_dtype", [None, torch.int64, torch.int32])
def test_cumprod_integers_wrap_like_torch(dtype, out_dtype):
    x = sample(dtype, (5, 70), 2)
    (out,) = outputs(*cumprod(x, 1, out_dtype))
    expected = torch.cumprod(x, 1, dtype=out_dtype)
    assert out.dtype == expected.dtype and torch.equal(out, expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cumprod_multiplies_in_torchs_order_and_precision(dtype):
    # torch multiplies along the line in order, float16 / bfloat16 in float32 and float32 in
    # double: a product that overflows (or underflows) and then meets a zero (or a large value)
    # comes out as torch's, and a long line does not drift.
    big, small = (1e20, 1e-30) if dtype != torch.float16 else (300.0, 1e-3)
    inf, nan = float("inf"), float("nan")
    special = torch.tensor([[big, big, 0.0, 2.0, 5.0], [small, small, 1 / small, 1 / small, 3.0],
                            [-2.0, inf, 0.0, 3.0, 1.0], [3.0, nan, 0.0, inf, 2.0],
                            [-0.0, 5.0, -1.0, inf, 1.0], [1e30, 1e30, 1e30, 1e-30, 1e-30]]).to(dtype)
    for x in (special, special.t().contiguous().t()):
        (out,) = outputs(*cumprod(x, 1))
        expected = torch.cumprod(x, 1)
        torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True)
        numbers = ~expected.isnan()
        assert torch.equal(out[numbers].signbit(), expected[numbers].signbit())  # -0.0 stays -0.0
    generator = torch.Generator().manual_seed(6)
    line = (1 + (torch.rand(2, 3000, generator=generator) - 0.5) * 0.01).to(dtype)
    (out,) = outputs(*cumprod(line, 1))
    # float32: the double product rounded to float, but for a rare tie in the last bit
    torch.testing.assert_close(out, torch.cumprod(line, 1), rtol=2.4e-7 if dtype == torch.float32 else 0, atol=0)


def test_cumprod_float_override_and_views():
    x = sample(torch.float32, (8, 30, 4), 3)[1:, ::3, 2]
    (out,) = outputs(*cumprod(x, 0, torch.float32))
    torch.testing.assert_close(out, torch.cumprod(x, 0))
    ints = sample(torch.int32, (4, 9), 4)
    (out,) = outputs(*cumprod(ints, 1, torch.float32))
    torch.testing.assert_close(out, torch.cumprod(ints, 1, dtype=torch.float32))


@pytest.mark.parametrize("function, reference", [(lib.aoti_torch_mps_cummax, torch.cummax),
                                                 (lib.aoti_torch_mps_cummin, torch.cummin)],
                         ids=["cummax", "cummin"])
@pytest.mark.parametrize("dtype", FLOATS + INTEGERS + [torch.bool], ids=str)
def test_cummax_cummin_match_torch(function, reference, dtype):
    x = sample(dtype, (4, 50), 5)  # small value range: many ties
    for dim in (1, 0, -2):
        values, indices = outputs(*extreme(x, dim, function))
        expected = reference(x, dim)
        assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)


@pytest.mark.parametrize("function, reference", [(lib.aoti_torch_mps_cummax, torch.cummax),
                                                 (lib.aoti_torch_mps_cummin, torch.cummin)],
                         ids=["cummax", "cummin"])
def test_cummax_cummin_nan_views_empty_0_dim(function, reference):
    x = torch.tensor([[1.0, float("nan"), 3.0, -1.0], [2.0, 2.0, float("inf"), -float("inf")]])
    values, indices = outputs(*extreme(x, 1, function))
    expected = reference(x, 1)
    assert torch.equal(values.nan_to_num(), expected.values.nan_to_num())
    assert torch.equal(indices, expected.indices)
    view = torch.randn(9, 12).t()[2:, ::2]
    values, indices = outputs(*extreme(view, 1, function))
    assert torch.equal(values, reference(view, 1).values) and torch.equal(indices, reference(view, 1).indices)
    for x in (torch.empty(0, 3), torch.tensor(2.5)):
        values, indices = outputs(*extreme(x, 0, function))
        expected = reference(x, 0)
        assert values.shape == expected.values.shape and torch.equal(values, expected.values)
        assert torch.equal(indices, expected.indices)


# With the GPU launch shape, lines of >= 1024 elements take one threadgroup each (blocks of
# 4096, 256 threads of 16): the boundary, a tail that leaves threads and part of a simdgroup
# idle, several blocks. With the CPU device's shape one thread walks each line. The tests of
# long lines run with both (the launch_shape fixture).
LONG_LENGTHS = [1024, 4096 + 37, 9000]


def with_nans(x, seed):
    """x with NaNs at a few random places of each line (floating dtypes only)."""
    if x.dtype.is_floating_point:
        generator = torch.Generator().manual_seed(seed)
        x = x.clone()
        x[torch.rand(x.shape, generator=generator) < 0.0004] = float("nan")
    return x


def slow_but(cases, *fast):
    """cases, each compiling kernels of its own (about a second each on the CPU device): those
    not in fast run with -m slow."""
    return [case if case in fast else pytest.param(*(case if isinstance(case, tuple) else (case,)),
                                                   marks=pytest.mark.slow) for case in cases]


EXTREMES = [(name, dtype) for name in ("cummax", "cummin") for dtype in FLOATS + INTEGERS + [torch.bool]]


@pytest.mark.parametrize("name, dtype", slow_but(EXTREMES, ("cummax", torch.float16), ("cummin", torch.int64)),
                         ids=str)
def test_cummax_cummin_of_long_lines_match_torch(name, dtype, launch_shape):
    function, reference = getattr(lib, f"aoti_torch_mps_{name}"), getattr(torch, name)
    # Few distinct values: ties everywhere, so the index rule (the last extreme; the last NaN
    # once one appeared) decides most indices.
    for length in LONG_LENGTHS:
        x = with_nans(sample(dtype, (2, length), length), length)
        if length == 9000 and x.dtype.is_floating_point:
            x[1] = x[1].nan_to_num()  # a line without NaN past the first block
        for line, dim in ((x, 1), (x.t().contiguous().t()[:, 3:], 1), (x.t(), 0)):
            values, indices = outputs(*extreme(line, dim, function))
            expected = reference(line, dim)
            torch.testing.assert_close(values, expected.values, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(indices, expected.indices)


def test_cummax_cummin_long_lines_extremes_after_the_first_block(launch_shape):
    # The extreme reached late (another block, another simdgroup, the last lane) and -0.0 / 0.0
    # ties: values and indices as torch's.
    x = torch.zeros(3, 8200, dtype=torch.float16)
    x[0, 5000], x[1, 4095], x[1, 4096] = 7.0, -0.0, 3.0
    x[2, ::2] = -0.0
    for function, reference in ((lib.aoti_torch_mps_cummax, torch.cummax), (lib.aoti_torch_mps_cummin, torch.cummin)):
        values, indices = outputs(*extreme(x, 1, function))
        expected = reference(x, 1)
        assert torch.equal(values, expected.values) and torch.equal(values.signbit(), expected.values.signbit())
        assert torch.equal(indices, expected.indices)


# cumprod's line kernels: float outputs scan (sign, special elements met, float-float mantissa,
# exponent) and redo in order a line whose running product comes near the accumulator's range
# (float32 for float16 / bfloat16 outputs, double for float32): results as torch's, which
# multiplies in order; integer outputs scan 64-bit wrapping products (exact).
def long_special_lines(dtype, length):
    """Lines of `length` whose products meet zeros, infinities, NaNs and -0.0 after the first
    block, and ones that leave the accumulator's range (then sticking at inf or 0 in order)
    and would come back in a reordered product."""
    big, small = {torch.float32: (1e38, 1e-38), torch.float16: (2.0 ** 15, 2.0 ** -14)}.get(dtype, (1e30, 1e-30))
    lines = torch.ones(7, length)
    lines[0, 5000], lines[0, 6000], lines[0, 7000] = -0.0, 3.0, float("inf")  # zero, then inf: NaN
    lines[1, 4100], lines[1, 8000] = float("-inf"), -2.0
    lines[2, 100], lines[2, 4500] = float("nan"), 0.0
    lines[3, 1000:1040], lines[3, 1040:1080] = big, small  # overflows in order, stays inf
    lines[4, 1000:1040], lines[4, 1040:1080] = small, big  # underflows in order, stays 0
    lines[5, 1000:1040], lines[5, 1040], lines[5, 1041:1081] = big, 0.0, small  # inf * 0: NaN
    lines[6] = 1 + (torch.rand(length, generator=torch.Generator().manual_seed(8)) - 0.5) * 0.01
    return lines.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cumprod_of_long_lines_matches_torch(dtype, launch_shape):
    lines = long_special_lines(dtype, 9000)
    for x, dim in ((lines, 1), (lines.t(), 0), (lines[:, 3:], 1)):
        (out,) = outputs(*cumprod(x, dim))
        expected = torch.cumprod(x, dim)
        exact = ~expected.isfinite() | (expected == 0)
        assert torch.equal(out[exact].nan_to_num(), expected[exact].nan_to_num())
        assert torch.equal(out[exact].signbit() | out[exact].isnan(), expected[exact].signbit() | expected[exact].isnan())
        # The random line: float32 the double product rounded (but for rare last-bit ties); the
        # scan rounds float16 / bfloat16 products of a more precise product than torch's float32
        # one: at most one unit in the last place apart.
        ulp = {torch.float32: 2.4e-7, torch.float16: 9.8e-4, torch.bfloat16: 7.9e-3}[dtype]
        torch.testing.assert_close(out[~exact].double(), expected[~exact].double(), rtol=ulp, atol=0)
    ints = torch.randint(-3, 4, (2, 5000), generator=torch.Generator().manual_seed(9))
    for out_dtype in (None, torch.int32):
        (out,) = outputs(*cumprod(ints, 1, out_dtype))
        assert torch.equal(out, torch.cumprod(ints, 1, dtype=out_dtype))
    flags = torch.rand(3, 2000, generator=torch.Generator().manual_seed(10)) > 0.001
    (out,) = outputs(*cumprod(flags, 1))
    assert torch.equal(out, torch.cumprod(flags, 1))


@pytest.mark.parametrize("dtype", slow_but(FLOATS, torch.float32), ids=str)
def test_logcumsumexp_of_long_lines_matches_float64(dtype, launch_shape):
    generator = torch.Generator().manual_seed(7)
    for length in LONG_LENGTHS:
        x = (torch.randn(2, length, generator=generator) * 30).to(dtype)
        x[0, length // 3] = float("-inf")
        for line, dim in ((x, 1), (x.t(), 0), (x[:, 5:], 1)):
            (out,) = outputs(*logcumsumexp(line, dim))
            expected = torch.logcumsumexp(line.double(), dim)
            torch.testing.assert_close(out.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    x = torch.randn(5000, generator=generator)
    x[:700], x[3000], x[4500] = float("-inf"), float("inf"), float("nan")
    (out,) = outputs(*logcumsumexp(x, 0))
    torch.testing.assert_close(out, torch.logcumsumexp(x, 0), equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_logcumsumexp_matches_torch(dtype):
    x = (torch.randn(5, 60, generator=torch.Generator().manual_seed(6)) * 30).to(dtype)  # overflows exp
    for dim in (1, -2):
        (out,) = outputs(*logcumsumexp(x, dim))
        expected = torch.logcumsumexp(x.double(), dim)
        torch.testing.assert_close(out.double(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_logcumsumexp_infinities_nan_views_empty_0_dim():
    x = torch.tensor([-float("inf"), -float("inf"), 0.0, float("inf"), 1.0, float("nan"), 2.0])
    (out,) = outputs(*logcumsumexp(x, 0))
    torch.testing.assert_close(out, torch.logcumsumexp(x, 0), equal_nan=True)
    view = torch.randn(7, 10).t()[1:, ::2]
    (out,) = outputs(*logcumsumexp(view, 0))
    torch.testing.assert_close(out, torch.logcumsumexp(view, 0))
    for x in (torch.empty(3, 0), torch.tensor(0.25)):
        (out,) = outputs(*logcumsumexp(x, -1))
        assert torch.equal(out, torch.logcumsumexp(x, -1))


def test_floating_input_to_integer_result_is_cast_first():
    # torch casts the input to dtype first (transformers' MoE path: cumsum of histc's float
    # counts with dtype=int32).
    counts = torch.tensor([[3.0, 0.0, 2.7, 5.0], [-1.5, 4.0, 1.0, 2.0]]).t()
    for dtype in (torch.int32, torch.int64):
        (out,) = outputs(*cumprod(counts, 0, dtype))
        assert out.dtype == dtype and torch.equal(out, torch.cumprod(counts, 0, dtype=dtype))
        r0 = ffi.new("AtenTensorHandle*")
        device = as_device(counts)
        code = lib.aoti_torch_mps_cumsum(device.handle, 0, ffi.new("int32_t*", DTYPE_CODE[dtype]), r0)
        (out,) = outputs(code, r0)
        assert torch.equal(out, torch.cumsum(counts, 0, dtype=dtype))


def test_bad_input():
    x = torch.randn(3, 4)
    poisoning_failure(cumprod(x, 2)[0], "aoti_torch_mps_cumprod", "dim")
    device, r0 = as_device(x), ffi.new("AtenTensorHandle*")
    float64 = ffi.new("int32_t*", 7)
    poisoning_failure(lib.aoti_torch_mps_cumprod(device.handle, 0, float64, r0), "float32 input to float64 output")
    poisoning_failure(extreme(x, -3, lib.aoti_torch_mps_cummax)[0], "aoti_torch_mps_cummax")
    poisoning_failure(logcumsumexp(torch.ones(3, dtype=torch.int64), 0)[0], "aoti_torch_mps_logcumsumexp")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_cummin(ffi.NULL, 0, r0, ffi.NULL), "aoti_torch_mps_cummin")
