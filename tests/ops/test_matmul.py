"""aoti_torch_mps_{mm,addmm,bmm,baddbmm}_out against torch eager CPU.

The reference is computed in float64 from the same (rounded) inputs. Tolerances, relative to
the scale sqrt(K) of a random-normal dot product: float32 1e-5, float16 1e-2, bfloat16 2e-2
(products accumulate in float32; only the stored result is rounded to the output dtype).

The shapes are chosen to reach each kernel of shaders/matmul.metal: the one-thread-per-output
kernel (small or odd shapes, K == 0, M == 1 against a row-major matrix), the simdgroup
row-dot kernel (M == 1 or N == 1 with unit-stride K, e.g. x @ weight.t()), for fewer than 16
rows or columns (the test_skinny_* cases) matmul_few_rows (GPU shape) and the matmul_gemv kernels
(CPU shape), and the 32x32,
64x64, 128x64 and 64x128 simdgroup-matrix tiled kernels, with tails in every dimension (the
last two double-buffer 16-deep K steps: one step, an odd number and a K tail are covered). The
tiled kernels are specialised by function constants (aligned_blocks: M and N whole blocks;
aligned_depth: K whole steps): the 64x64 case has both, (130, 16, 70) whole K steps only, the
other tiled shapes neither; test_mm_whole_blocks (slow) covers the rest. Those are the GPU launch
shape; the CPU launch shape (ETMETAL_OP_SHAPES=cpu, the CPU device's default) runs the same
products on matmul_panels (8 x 32 strips per thread, b staged 64 deep; transposed when N < 32):
the tests of tiled shapes run with both (the launch_shape fixture), and test_panel_products
covers that kernel's edges."""

import math
import threading

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import device_view, launch_shape, poisoning_failure, random, reinterpret, to_device  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def assert_matches(result, expected, dtype, depth):
    tolerance = TOLERANCE[dtype] * max(1.0, math.sqrt(depth))
    torch.testing.assert_close(result.double(), expected.double(), rtol=TOLERANCE[dtype],
                               atol=tolerance)


def filled_like(shape, dtype, value=float("nan")):
    return torch.full(shape, value, dtype=dtype)


def run(function, out, *operands, scalars=()):
    """Runs the op into a device copy of `out` (any strides) and returns the result."""
    device_out = device_view(out)
    handles = [device_view(x) for x in operands]
    etmetal_py.check(function(device_out.handle, *[h.handle for h in handles], *scalars))
    return device_out.torch()


def reference_addmm(self, a, b, beta, alpha):
    product = a.double() @ b.double()
    if beta == 0:
        return alpha * product
    return beta * self.double() + alpha * product


# (M, K, N): naive, row-dot candidates, 32x32 tiles with tails, 64x64 tiles (exact and with
# tails), 128x64 tiles with tails (K: three steps with a tail, one step), 64x128 tiles.
MM_SHAPES = [(1, 1, 1), (3, 5, 7), (1, 300, 37), (45, 130, 1), (33, 47, 19), (64, 32, 64),
             (100, 33, 90), (260, 40, 300), (130, 16, 70), (70, 50, 200)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", MM_SHAPES)
def test_mm_contiguous(M, K, N, dtype, no_leaks, launch_shape):
    a, b = random(M, K, dtype=dtype), random(K, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_mm_out, filled_like((M, N), dtype), a, b)
    assert result.dtype == dtype
    assert_matches(result, a.double() @ b.double(), dtype, K)


# The other specialisations of the tiled kernels (MM_SHAPES has 64 x 64 whole blocks and a
# 128x64 one with a whole K step): 32x32 whole blocks with a K tail, 128x64 and 64x128 whole
# blocks and steps, with an addend. Slow: each is one more compiled variant.
@pytest.mark.slow
@pytest.mark.parametrize("M,K,N", [(32, 40, 32), (128, 48, 128), (64, 32, 256)])
def test_mm_whole_blocks(M, K, N, no_leaks, launch_shape):
    a, b, bias = random(M, K), random(K, N), random(N)
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), torch.float32), bias, a, b,
                 scalars=(0.5, 2.0))
    assert_matches(result, reference_addmm(bias, a, b, 0.5, 2.0), torch.float32, K)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", [(1, 300, 37), (7, 33, 5), (70, 90, 41), (1, 64, 1), (150, 70, 130)])
def test_addmm_with_transposed_weight(M, K, N, dtype, no_leaks, launch_shape):
    # What Inductor emits for nn.Linear: addmm(bias, x, weight.t()).
    x, weight, bias = random(M, K, dtype=dtype), random(N, K, dtype=dtype), random(N, dtype=dtype)
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), dtype), bias, x, weight.t(),
                 scalars=(1.0, 1.0))
    assert_matches(result, reference_addmm(bias, x, weight.t(), 1.0, 1.0), dtype, K)


# Row vector times matrix: the vector staged in chunks of 512 (tails past them), 32 output
# columns per threadgroup (tails past them), weights read along K (x @ weight.t()) or along N.
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("K,N", [(1100, 70), (512, 33), (64, 1)])
def test_row_vector_times_matrix_in_both_layouts(K, N, dtype, no_leaks):
    x = random(3, 2 * K, dtype=dtype)[1:2, ::2]  # strided along K, storage offset
    along_k = random(N, K + 3, dtype=dtype)[:, 3:].t()  # unit stride along K
    along_n = random(K, N + 5, dtype=dtype)[:, 5:]  # unit stride along N, row pitch N + 5
    bias = random(N, dtype=dtype)
    for weight in (along_k, along_n):
        result = run(lib.aoti_torch_mps_mm_out, filled_like((1, N), dtype), x, weight)
        assert_matches(result, x.double() @ weight.double(), dtype, K)
        result = run(lib.aoti_torch_mps_addmm_out, filled_like((1, N), dtype), bias, x, weight,
                     scalars=(0.5, -2.0))
        assert_matches(result, reference_addmm(bias, x, weight, 0.5, -2.0), dtype, K)
    a, b = random(4, 1, K, dtype=dtype), random(4, N, K, dtype=dtype).transpose(1, 2)
    result = run(lib.aoti_torch_mps_bmm_out, filled_like((4, 1, N), dtype), a, b)
    assert_matches(result, a.double() @ b.double(), dtype, K)


# matmul_panels, the CPU launch shape of the tiled products: strips shifted back at the right and
# bottom edges (M not a multiple of 8 or 128, N not a multiple of 32), N < 32 run transposed, K
# in several 64-deep steps with a tail, b staged by rows (row-major) or by columns (x @
# weight.t(), contiguous along K in fours, then a tail; and strided along both), a strided along
# both, broadcast addends and alpha/beta, out strided or aliasing self.
PANEL_SHAPES = [(16, 1, 32), (17, 130, 33), (135, 67, 100), (40, 200, 17), (300, 64, 64)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["row_major", "weight_t", "strided"])
@pytest.mark.parametrize("M,K,N", PANEL_SHAPES)
def test_panel_products(M, K, N, layout, dtype, monkeypatch, no_leaks):
    monkeypatch.setenv("ETMETAL_OP_SHAPES", "cpu")
    if layout == "row_major":
        a, b = random(M, K, dtype=dtype), random(K, N, dtype=dtype)
    elif layout == "weight_t":
        a, b = random(M, K + 1, dtype=dtype)[:, 1:], random(N, K + 2, dtype=dtype)[:, 2:].t()
    else:
        a, b = random(K, 2 * M, dtype=dtype).t()[::2], random(2 * K, 2 * N, dtype=dtype)[::2, 1::2]
    result = run(lib.aoti_torch_mps_mm_out, filled_like((M, N), dtype), a, b)
    assert_matches(result, a.double() @ b.double(), dtype, K)
    bias = random(N, dtype=dtype)
    out = filled_like((N, 2 * M), dtype).t()[::2]
    result = run(lib.aoti_torch_mps_addmm_out, out, bias, a, b, scalars=(0.5, -2.0))
    assert_matches(result, reference_addmm(bias, a, b, 0.5, -2.0), dtype, K)
    self = random(M, N, dtype=dtype)
    device_self, device_a, device_b = device_view(self), device_view(a), device_view(b)
    etmetal_py.check(lib.aoti_torch_mps_addmm_out(device_self.handle, device_self.handle, device_a.handle,
                                                  device_b.handle, 0.25, 2.0))
    assert_matches(device_self.torch(), reference_addmm(self, a, b, 0.25, 2.0), dtype, K)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_panel_batched_products(dtype, monkeypatch, no_leaks):
    monkeypatch.setenv("ETMETAL_OP_SHAPES", "cpu")
    B, M, K, N = 3, 150, 90, 70
    a, b = random(B, M, K, dtype=dtype), random(B, N, K, dtype=dtype).transpose(1, 2)
    result = run(lib.aoti_torch_mps_bmm_out, filled_like((B, M, N), dtype), a, b)
    assert_matches(result, a.double() @ b.double(), dtype, K)
    self = random(B, 1, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_baddbmm_out, filled_like((B, M, N), dtype), self, a, b, scalars=(-1.0, 0.5))
    assert_matches(result, reference_addmm(self, a, b, -1.0, 0.5), dtype, K)


# Few rows or few columns (< 16; the product is transposed when N < M). The device's own launch
# shape; on the CPU device the matmul_gemv kernels: gemv_kdot when a and b are unit-stride along K
# (x @ weight.t()), gemv_columns when b is unit-stride along N and N >= 32, else the
# one-thread-per-output kernel; K below, at and past the 4-wide steps (tails of 1 to 3), N in
# partial column strips. test_few_rows_products forces the GPU shape.
SKINNY_SHAPES = [(1, 1, 33), (1, 2051, 67), (2, 6, 40), (3, 5, 32), (5, 37, 130), (8, 259, 47),
                 (15, 64, 33), (70, 45, 3), (300, 130, 1), (9, 2, 12)]


def skinny_operands(M, K, N, layout, dtype):
    if layout == "weight_t":  # offset views, unit stride along K, row pitches past K
        return random(M, K + 1, dtype=dtype)[:, 1:], random(N, K + 2, dtype=dtype)[:, 2:].t()
    if layout == "row_major":
        return random(M, K, dtype=dtype), random(K, N, dtype=dtype)
    # x strided along K; weight unit-stride along N with a row pitch past N and an offset
    return random(M, 2 * K, dtype=dtype)[:, ::2], random(K, N + 3, dtype=dtype)[:, 3:]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["weight_t", "row_major", "strided"])
@pytest.mark.parametrize("M,K,N", SKINNY_SHAPES)
def test_skinny_products(M, K, N, layout, dtype, no_leaks):
    check_skinny_product(M, K, N, layout, dtype)


def check_skinny_product(M, K, N, layout, dtype):
    x, weight = skinny_operands(M, K, N, layout, dtype)
    assert x.shape == (M, K) and weight.shape == (K, N)
    result = run(lib.aoti_torch_mps_mm_out, filled_like((M, N), dtype), x, weight)
    assert_matches(result, x.double() @ weight.double(), dtype, K)
    bias = random(N, dtype=dtype)
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), dtype), bias, x, weight,
                 scalars=(0.5, -2.0))
    assert_matches(result, reference_addmm(bias, x, weight, 0.5, -2.0), dtype, K)


# The GPU launch shape of those products: matmul_few_rows (any strides) once K >= 16 where the
# row-vector and row-dot kernels do not take the product; K at one 64-deep step and in several
# with a tail (259), columns in 64-wide blocks with a tail (130), 2 to 15 rows, transposed
# (N < M), a single column from a strided operand; over 8 rows, the wide form: 128-wide blocks
# with a tail (300) and 32-deep steps with a tail (100).
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["weight_t", "row_major", "strided"])
@pytest.mark.parametrize("M,K,N", [(2, 16, 40), (5, 37, 130), (8, 259, 47), (15, 64, 33), (12, 100, 300),
                                   (70, 45, 3), (300, 130, 1)])
def test_few_rows_products(M, K, N, layout, dtype, monkeypatch, no_leaks):
    monkeypatch.setenv("ETMETAL_OP_SHAPES", "gpu")
    check_skinny_product(M, K, N, layout, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,M,K,N", [(3, 4, 70, 33), (2, 1, 129, 40), (4, 40, 21, 2)])
def test_skinny_batched_products(B, M, K, N, dtype, no_leaks, launch_shape):
    a = random(B, M, K + 1, dtype=dtype)[:, :, 1:]
    along_k = random(B, N, K, dtype=dtype).transpose(1, 2)
    along_n = random(B, K, N, dtype=dtype)
    for b in (along_k, along_n):
        result = run(lib.aoti_torch_mps_bmm_out, filled_like((B, M, N), dtype), a, b)
        assert_matches(result, a.double() @ b.double(), dtype, K)
    self = random(B, 1, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_baddbmm_out, filled_like((B, M, N), dtype), self, a, along_k,
                 scalars=(-1.0, 0.5))
    assert_matches(result, reference_addmm(self, a, along_k, -1.0, 0.5), dtype, K)


def test_skinny_product_into_strided_out(no_leaks):
    # The transposed product (N < M) stores through out's exchanged strides.
    M, K, N = 37, 50, 5
    x, weight = random(M, K), random(N, K).t()
    out = filled_like((N + 1, 2 * M), torch.float32).t()[::2, 1:]
    assert out.shape == (M, N)
    result = run(lib.aoti_torch_mps_mm_out, out, x, weight)
    assert_matches(result, x.double() @ weight.double(), torch.float32, K)


@pytest.mark.parametrize("M,K,N", [(5, 9, 3), (40, 24, 36), (130, 20, 70)])
def test_mm_offset_and_strided_views(M, K, N, no_leaks, launch_shape):
    # Every operand is a slice with a storage offset and non-unit strides in both dimensions.
    a = random(2 * M + 3, 3 * K)[3::2, 1::3]
    b = random(2 * N, K + 1).t()[1:, 1::2]
    out = filled_like((M + 2, 2 * N), torch.float32)[2:, ::2]
    assert a.shape == (M, K) and b.shape == (K, N) and out.shape == (M, N)
    result = run(lib.aoti_torch_mps_mm_out, out, a, b)
    assert_matches(result, a.double() @ b.double(), torch.float32, K)


def test_mm_result_lands_in_a_strided_out_only(no_leaks):
    M, K, N = 20, 17, 18
    a, b = random(M, K), random(K, N)
    storage = filled_like((M, 2 * N + 1), torch.float32, 7.0)
    out_view = storage[:, 1::2]
    device_storage = to_device(storage)
    out_tensor = reinterpret(device_storage, [M, N], out_view.stride(), 1)
    ta, tb = Tensor.from_array(a, copy=True), Tensor.from_array(b, copy=True)
    etmetal_py.check(lib.aoti_torch_mps_mm_out(out_tensor.handle, ta.handle, tb.handle))
    written = device_storage.torch()
    expected = storage.clone()
    expected[:, 1::2] = (a.double() @ b.double()).float()
    untouched = torch.ones_like(storage, dtype=torch.bool)
    untouched[:, 1::2] = False
    assert torch.equal(written[untouched], expected[untouched])
    assert_matches(written[:, 1::2], expected[:, 1::2], torch.float32, K)


@pytest.mark.parametrize("self_shape", [(), (1,), (23,), (1, 23), (31, 1), (31, 23)])
@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, -2.0)])
def test_addmm_broadcasts_self(self_shape, beta, alpha, no_leaks):
    M, K, N = 31, 20, 23
    self, a, b = random(*self_shape), random(M, K), random(K, N)
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), torch.float32), self, a, b,
                 scalars=(beta, alpha))
    assert_matches(result, reference_addmm(self, a, b, beta, alpha), torch.float32, K)


@pytest.mark.parametrize("M,K,N", [(4, 6, 5), (48, 40, 33)])
def test_addmm_beta_zero_ignores_nan_self(M, K, N, no_leaks):
    self = torch.full((M, N), float("nan"))
    self[0, 0] = float("inf")
    a, b = random(M, K), random(K, N)
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), torch.float32), self, a, b,
                 scalars=(0.0, 1.5))
    assert torch.isfinite(result).all()
    assert_matches(result, 1.5 * (a.double() @ b.double()), torch.float32, K)


@pytest.mark.parametrize("dtype", DTYPES)
def test_addmm_in_place_out_is_self(dtype, no_leaks, launch_shape):
    M, K, N = 34, 21, 40
    self, a, b = random(M, N, dtype=dtype), random(M, K, dtype=dtype), random(K, N, dtype=dtype)
    device_self = Tensor.from_array(self, copy=True)
    ta, tb = Tensor.from_array(a, copy=True), Tensor.from_array(b, copy=True)
    etmetal_py.check(lib.aoti_torch_mps_addmm_out(device_self.handle, device_self.handle, ta.handle,
                                                  tb.handle, 0.25, 2.0))
    assert_matches(device_self.torch(), reference_addmm(self, a, b, 0.25, 2.0), dtype, K)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_depth_gives_beta_self_or_zeros(dtype, no_leaks):
    M, N = 6, 9
    a, b, self = torch.empty(M, 0, dtype=dtype), torch.empty(0, N, dtype=dtype), random(N, dtype=dtype)
    result = run(lib.aoti_torch_mps_mm_out, filled_like((M, N), dtype), a, b)
    assert torch.equal(result, torch.zeros(M, N, dtype=dtype))
    result = run(lib.aoti_torch_mps_addmm_out, filled_like((M, N), dtype), self, a, b,
                 scalars=(3.0, 1.0))
    assert_matches(result, (3.0 * self.double()).expand(M, N), dtype, 1)
    result = run(lib.aoti_torch_mps_bmm_out, filled_like((2, M, N), dtype), torch.empty(2, M, 0, dtype=dtype),
                 torch.empty(2, 0, N, dtype=dtype))
    assert torch.equal(result, torch.zeros(2, M, N, dtype=dtype))


@pytest.mark.parametrize("shape", [(0, 5, 4), (3, 5, 0), (0, 0, 0)])
def test_empty_output_is_a_no_op(shape, no_leaks):
    M, K, N = shape
    result = run(lib.aoti_torch_mps_mm_out, torch.empty(M, N), random(M, K), random(K, N))
    assert result.shape == (M, N)
    result = run(lib.aoti_torch_mps_bmm_out, torch.empty(0, M, N), random(0, M, K), random(0, K, N))
    assert result.shape == (0, M, N)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,M,K,N", [(3, 5, 7, 2), (2, 1, 128, 33), (4, 37, 50, 29), (2, 70, 20, 300)])
def test_bmm(B, M, K, N, dtype, no_leaks, launch_shape):
    a, b = random(B, M, K, dtype=dtype), random(B, K, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_bmm_out, filled_like((B, M, N), dtype), a, b)
    assert_matches(result, a.double() @ b.double(), dtype, K)


def test_bmm_permuted_batches_and_out(no_leaks, launch_shape):
    # Batch dimension not outermost in any operand, as attention's q @ k.transpose(-1, -2).
    B, M, K, N = 3, 20, 24, 18
    a = random(M, B, K).permute(1, 0, 2)
    b = random(B, N, K).transpose(1, 2)
    out = filled_like((M, N, B), torch.float32).permute(2, 0, 1)
    result = run(lib.aoti_torch_mps_bmm_out, out, a, b)
    assert_matches(result, a.double() @ b.double(), torch.float32, K)


@pytest.mark.parametrize("self_shape", [(18,), (20, 1), (1, 20, 18), (3, 20, 18), (3, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_baddbmm_broadcasts_self(self_shape, dtype, no_leaks, launch_shape):
    B, M, K, N = 3, 20, 24, 18
    self, a, b = random(*self_shape, dtype=dtype), random(B, M, K, dtype=dtype), random(B, K, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_baddbmm_out, filled_like((B, M, N), dtype), self, a, b,
                 scalars=(-1.0, 0.5))
    assert_matches(result, reference_addmm(self, a, b, -1.0, 0.5), dtype, K)


def test_baddbmm_beta_zero_ignores_nan_self(no_leaks):
    self = torch.full((2, 3, 4), float("nan"))
    a, b = random(2, 3, 5), random(2, 5, 4)
    result = run(lib.aoti_torch_mps_baddbmm_out, filled_like((2, 3, 4), torch.float32), self, a, b,
                 scalars=(0.0, 1.0))
    assert_matches(result, a.double() @ b.double(), torch.float32, 5)


def test_threads_encode_on_their_own_streams(no_leaks):
    # Each thread encodes into its own stream; kernels are shared, their bindings are not.
    shapes = [(40, 33, 20), (1, 128, 70), (9, 7, 5), (70, 20, 300)]
    results, errors = {}, []

    def work(index, M, K, N):
        try:
            for repeat in range(3):
                a, b = random(M, K), random(K, N)
                results[(index, repeat)] = (run(lib.aoti_torch_mps_mm_out, filled_like((M, N), torch.float32), a, b),
                                       a.double() @ b.double(), K)
        except Exception as error:  # reported below: pytest does not see other threads' errors
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, *shape)) for i, shape in enumerate(shapes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(results) == 3 * len(shapes)
    for result, expected, depth in results.values():
        assert_matches(result, expected, torch.float32, depth)


# -- bad input ---------------------------------------------------------------------------

def expect_error(code, *fragments):
    """The call failed with a message naming the op and problem, and poisoned the stream."""
    poisoning_failure(code, *fragments)


def handles(*arrays):
    return [to_device(x) for x in arrays]


def test_mismatched_inner_dimensions(no_leaks):
    out, a, b = handles(torch.empty(3, 4), random(3, 5), random(6, 4))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, a.handle, b.handle), "mm", "cannot multiply",
                 "[3, 5]", "[6, 4]")


def test_wrong_out_shape(no_leaks):
    out, a, b = handles(torch.empty(3, 5), random(3, 5), random(5, 4))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, a.handle, b.handle), "mm", "out has shape [3, 5]",
                 "[3, 4]")


def test_wrong_rank(no_leaks):
    out, a, b = handles(torch.empty(2, 3, 4), random(2, 3, 5), random(2, 5, 4))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, a.handle, b.handle), "mm", "must be 2-D")
    out2 = handles(torch.empty(3, 4))[0]
    a2 = handles(random(3, 5))[0]
    expect_error(lib.aoti_torch_mps_bmm_out(out2.handle, a2.handle, b.handle), "bmm", "must be 3-D")


def test_batch_mismatch(no_leaks):
    out, a, b = handles(torch.empty(2, 3, 4), random(2, 3, 5), random(3, 5, 4))
    expect_error(lib.aoti_torch_mps_bmm_out(out.handle, a.handle, b.handle), "bmm", "batch sizes differ")


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64])
def test_unsupported_dtype(dtype, no_leaks):
    out, a, b = handles(torch.zeros(3, 4, dtype=dtype), torch.ones(3, 5, dtype=dtype), torch.ones(5, 4, dtype=dtype))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, a.handle, b.handle), "mm",
                 "supported are float32, float16 and bfloat16")


def test_mixed_dtypes(no_leaks):
    out, a, b = handles(torch.empty(3, 4), random(3, 5), random(5, 4, dtype=torch.float16))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, a.handle, b.handle), "mm", "dtypes differ")
    out, self, a, b = handles(torch.empty(3, 4), random(4, dtype=torch.bfloat16), random(3, 5), random(5, 4))
    expect_error(lib.aoti_torch_mps_addmm_out(out.handle, self.handle, a.handle, b.handle, 1.0, 1.0),
                 "addmm", "self has dtype bfloat16")


def test_self_that_does_not_broadcast(no_leaks):
    out, self, a, b = handles(torch.empty(3, 4), random(5), random(3, 5), random(5, 4))
    expect_error(lib.aoti_torch_mps_addmm_out(out.handle, self.handle, a.handle, b.handle, 0.0, 1.0),
                 "addmm", "does not broadcast")


def test_out_overlapping_an_input(no_leaks):
    a, b = handles(random(4, 4), random(4, 4))
    expect_error(lib.aoti_torch_mps_mm_out(a.handle, a.handle, b.handle), "mm", "overlaps an input")


def test_null_handles(no_leaks):
    out, a, b = handles(torch.empty(3, 4), random(3, 5), random(5, 4))
    expect_error(lib.aoti_torch_mps_mm_out(out.handle, ffi.NULL, b.handle), "aoti_torch_mps_mm_out", "null")
    expect_error(lib.aoti_torch_mps_addmm_out(ffi.NULL, out.handle, a.handle, b.handle, 1.0, 1.0),
                 "aoti_torch_mps_addmm_out", "null")
    expect_error(lib.aoti_torch_mps_baddbmm_out(out.handle, out.handle, ffi.NULL, b.handle, 1.0, 1.0),
                 "aoti_torch_mps_baddbmm_out", "null")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", [(513, 257, 129), (256, 1024, 256), (1, 4096, 1000), (1000, 777, 1)])
def test_mm_large(M, K, N, dtype, launch_shape):
    a, b = random(M, K, dtype=dtype), random(K, N, dtype=dtype)
    result = run(lib.aoti_torch_mps_mm_out, filled_like((M, N), dtype), a, b)
    assert_matches(result, a.double() @ b.double(), dtype, K)


class MatmulModel(torch.nn.Module):
    """Products that Inductor lowers to the fallbacks: addmm with a transposed weight view
    (nn.Linear, one row and many), bmm of transposed views, baddbmm with alpha and beta."""

    def __init__(self):
        super().__init__()
        self.project = torch.nn.Linear(96, 80)
        self.head = torch.nn.Linear(80, 3)
        self.addend = torch.nn.Parameter(torch.randn(1, 24, 24))

    def forward(self, x, token):
        h = self.project(x)                                     # [4, 24, 80]
        scores = torch.bmm(h, h.transpose(1, 2)) / 10           # [4, 24, 24]
        mixed = torch.baddbmm(self.addend, scores.softmax(-1), scores, beta=0.5, alpha=2.0)
        return mixed, self.head(self.project(token))            # token: [1, 96]


@pytest.mark.slow
def test_compiled_model_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = MatmulModel().eval()
    x, token = torch.randn(4, 24, 96), torch.randn(1, 96)
    with torch.no_grad():
        path = etmetal_py.aoti_compile_and_package(etmetal_py.export(model, (x, token)), tmp_path / "mm.pt2")
        runner = etmetal_py.aoti_load_package(path)
        for result, expected in zip(runner(x, token), model(x, token)):
            torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)
