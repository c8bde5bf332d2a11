"""Weight-quantized linear layers against torch references on random data:
aoti_torch_mps__linear_fp_act_{1..7}bit_weight (torchao's packing), aoti_torch_mps__weight_int4pack_mm
(MPS int4pack layout) and aoti_torch_mps__weight_int8pack_mm, for the matrix-vector kernel
(M = 1) and the tiled kernel (M > 1), float32 / float16 / bfloat16, every group size, and
shapes with tails in N and K.

The references dequantize in float32 and multiply in float64 (on the same rounded inputs);
the kernels accumulate in float32. Tolerances relative to the output's scale (sqrt(K) * |w|
for random O(1) activations): float32 1e-5, float16 2e-3, bfloat16 1e-2 (the output rounding
of the activation dtype dominates)."""

import gc

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.ops import quantize, reference
from ops_testing import assert_close_scaled, poisoning_failure, reinterpret, to_device

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def handles(args):
    """C arguments: device tensors as their handles (the caller keeps the tensors alive)."""
    return [a.handle if isinstance(a, Tensor) else a for a in args]


def call(function, *args):
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(function(*handles(args), out))
    return Tensor(out[0]).torch()


def failure(function, *args):
    """The runtime's message for a call that must fail (and poison the stream)."""
    out = ffi.new("AtenTensorHandle*")
    return poisoning_failure(function(*handles(args), out))


def assert_matches(actual, expected, dtype):
    assert_close_scaled(actual, expected, TOLERANCE[dtype])


def linear_lowbit(bits, A, B, group_size, S, Z):
    function = getattr(lib, f"aoti_torch_mps__linear_fp_act_{bits}bit_weight")
    return call(function, to_device(A), to_device(B), group_size, to_device(S), to_device(Z))


def random_lowbit(M, K, N, bits, group_size, dtype, seed=0):
    """Activations and torchao-layout weights: random codes, scales and zeros (as torchao's
    own MPS test draws them)."""
    g = torch.Generator().manual_seed(seed)
    groups = -(-K // group_size)
    A = (torch.rand(M, K, generator=g) * 2 - 1).to(dtype)
    q = torch.randint(0, 1 << bits, (N, K), generator=g, dtype=torch.uint8)
    S = (torch.rand(N, groups, generator=g) + 0.01).to(dtype)
    Z = (-torch.randint(0, 1 << bits, (N, groups), generator=g).float() * S.float()).to(dtype)
    return A, q, S, Z


def expected_lowbit(A, q, S, Z, group_size):
    K = A.shape[1]
    w = S.double().repeat_interleave(group_size, 1)[:, :K] * q.double() \
        + Z.double().repeat_interleave(group_size, 1)[:, :K]
    return A.double() @ w.t()


# (M, K, N, group_size): torchao's MPS test shapes plus tails of N below a tile.
LOWBIT_SHAPES = [
    (1, 8, 4, 32), (1, 72, 3, 64), (1, 1000, 28, 256), (1, 520, 13, 128),
    (3, 64, 8, 64), (7, 64, 20, 64), (41, 144, 20, 128), (19, 256, 37, 256), (33, 8, 33, 32),
]


@pytest.mark.parametrize("bits", range(1, 8))
@pytest.mark.parametrize("M,K,N,group_size", [LOWBIT_SHAPES[2], LOWBIT_SHAPES[6]])
def test_lowbit_every_width(bits, M, K, N, group_size):
    A, q, S, Z = random_lowbit(M, K, N, bits, group_size, torch.float32, seed=bits)
    out = linear_lowbit(bits, A, quantize.pack_lowbit(q, bits), group_size, S, Z)
    assert out.shape == (M, N) and out.dtype == torch.float32
    assert_matches(out, expected_lowbit(A, q, S, Z, group_size), torch.float32)


@pytest.mark.parametrize("M,K,N,group_size", LOWBIT_SHAPES)
def test_lowbit_shapes(M, K, N, group_size):
    A, q, S, Z = random_lowbit(M, K, N, 4, group_size, torch.float32, seed=M + K + N)
    out = linear_lowbit(4, A, quantize.pack_lowbit(q, 4), group_size, S, Z)
    assert_matches(out, expected_lowbit(A, q, S, Z, group_size), torch.float32)


# The matrix-vector kernel serves up to 8 activation rows at once (each weight byte read once
# for all of them): several K steps of 512 with a tail, partial threadgroups of 128 output rows
# (one and several per launch), quantization groups spanning 2 to 16 lanes.
@pytest.mark.parametrize("M,K,N,group_size", [(2, 1544, 70, 32), (4, 1024, 33, 256), (3, 520, 100, 128),
                                              (4, 1536, 64, 64), (8, 1536, 300, 64), (6, 520, 130, 128)])
def test_lowbit_matrix_vector_batches(M, K, N, group_size):
    A, q, S, Z = random_lowbit(M, K, N, 4, group_size, torch.float16, seed=M + K + N)
    out = linear_lowbit(4, A, quantize.pack_lowbit(q, 4), group_size, S, Z)
    assert_matches(out, expected_lowbit(A, q, S, Z, group_size), torch.float16)
    single = linear_lowbit(4, A[-1:], quantize.pack_lowbit(q, 4), group_size, S, Z)
    assert_matches(single, expected_lowbit(A[-1:], q, S, Z, group_size), torch.float16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [3, 4])
@pytest.mark.parametrize("M", [1, 5])
def test_lowbit_half_dtypes(dtype, bits, M):
    A, q, S, Z = random_lowbit(M, 200, 19, bits, 64, dtype, seed=bits * M)
    out = linear_lowbit(bits, A, quantize.pack_lowbit(q, bits), 64, S, Z)
    assert out.dtype == dtype
    assert_matches(out, expected_lowbit(A, q, S, Z, 64), dtype)


@pytest.mark.parametrize("M", [1, 6])
def test_lowbit_strided_activations(M):
    """A transposed, offset view of A is read through its strides, without a copy."""
    A, q, S, Z = random_lowbit(M, 96, 10, 5, 32, torch.float32, seed=7)
    storage = torch.zeros(3 + 96 * M)
    view = torch.as_strided(storage, (M, 96), (1, M), 3)
    view.copy_(A)
    base = to_device(storage)
    strided = reinterpret(base, [M, 96], [1, M], 3)
    out = call(lib.aoti_torch_mps__linear_fp_act_5bit_weight, strided,
               to_device(quantize.pack_lowbit(q, 5)), 32, to_device(S), to_device(Z))
    assert_matches(out, expected_lowbit(A, q, S, Z, 32), torch.float32)


def test_pack_lowbit_matches_bit_stream():
    """3-bit packing by hand: value k occupies bits [3k, 3k + 3) of the row's byte stream."""
    values = torch.tensor([[5, 1, 7, 0, 2, 6, 3, 4]], dtype=torch.uint8)
    stream = sum(int(v) << (3 * k) for k, v in enumerate(values[0]))
    expected = torch.tensor([[(stream >> (8 * i)) & 0xFF for i in range(3)]], dtype=torch.uint8)
    assert torch.equal(quantize.pack_lowbit(values, 3), expected)
    assert torch.equal(quantize.unpack_lowbit(expected, 3, 8), values)
    assert torch.equal(torch.ops.torchao._pack_weight_3bit(values), expected)


@pytest.mark.parametrize("bits", range(1, 9))
def test_unpack_inverts_pack(bits):
    q = torch.randint(0, 1 << bits, (2, 3, 40), dtype=torch.uint8)
    assert torch.equal(quantize.unpack_lowbit(quantize.pack_lowbit(q, bits), bits, 40), q)


def test_quantize_lowbit_round_trip():
    w = torch.randn(12, 128)
    B, S, Z = quantize.quantize_lowbit(w, 6, 32)
    restored = quantize.dequantize_affine(B, S, Z, 6, 128, 32)
    step = S.repeat_interleave(32, 1)
    assert bool(((restored - w).abs() <= step / 2 + 1e-6).all())


def test_registered_torchao_op_matches_kernel():
    """torch.ops.torchao._linear_fp_act_4bit_weight (CPU reference) and the C function agree."""
    w = torch.randn(24, 256)
    A = torch.randn(3, 256)
    B, S, Z = quantize.quantize_lowbit(w, 4, 64)
    expected = torch.ops.torchao._linear_fp_act_4bit_weight(A, B, 64, S, Z)
    assert_matches(linear_lowbit(4, A, B, 64, S, Z), expected, torch.float32)
    assert_matches(expected, reference.linear_lowbit(A, B, 64, S, Z, 4), torch.float32)


def test_lowbit_argument_errors():
    A, q, S, Z = random_lowbit(2, 64, 8, 4, 32, torch.float32)
    B = to_device(quantize.pack_lowbit(q, 4))
    fn = lib.aoti_torch_mps__linear_fp_act_4bit_weight
    L = "_linear_fp_act_4bit_weight: "
    assert f"aoti_torch_mps__linear_fp_act_4bit_weight: {L}group_size must be 32, 64, 128 or 256, got 48" in failure(
        fn, to_device(A), B, 48, to_device(S), to_device(Z))
    assert "_linear_fp_act_3bit_weight: B must have 3 * K / 8 = 24 bytes per row" in failure(
        lib.aoti_torch_mps__linear_fp_act_3bit_weight, to_device(A), B, 32,
        to_device(S), to_device(Z))
    assert L + "K (A.size(1)) must be a multiple of 8" in failure(fn, to_device(A[:, :60]), B, 32, to_device(S),
                                      to_device(Z))
    assert L + "S must have the activation dtype float32" in failure(
        fn, to_device(A), B, 32, to_device(S.half()), to_device(Z))
    assert L + "Z must have shape [8, 2]" in failure(
        fn, to_device(A), B, 32, to_device(S), to_device(Z[:, :1]))
    assert L + "A must be float32, float16 or bfloat16" in failure(
        fn, to_device(A.double()), B, 32, to_device(S), to_device(Z))


# --- torch's _weight_int4pack_mm (MPS layout) ---------------------------------------------

def test_int4pack_reference_matches_torch_cpu_op():
    """The MPS-layout reference computes what torch's own CPU int4 op computes for the same
    codes, scales and zeros (w = scale * (q - 8) + zero)."""
    w = torch.randn(16, 128)
    A = torch.randn(4, 128)
    mat2, sz = quantize.quantize_int4pack(w, 32)
    q = quantize.int4pack_values(mat2, 128).to(torch.int32)
    cpu_packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
    expected = torch.ops.aten._weight_int4pack_mm_for_cpu(A, cpu_packed, 32, sz)
    torch.testing.assert_close(reference.weight_int4pack_mm(A, mat2, 32, sz), expected,
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,K,N,group_size", [(1, 256, 24, 32), (1, 96, 8, 64),
                                              (9, 128, 40, 128), (2, 512, 16, 256)])
def test_weight_int4pack_mm(dtype, M, K, N, group_size):
    g = torch.Generator().manual_seed(M * N)
    w = torch.randn(N, K, generator=g)
    A = torch.randn(M, K, generator=g).to(dtype)
    mat2, sz = quantize.quantize_int4pack(w, group_size, dtype)
    out = call(lib.aoti_torch_mps__weight_int4pack_mm, to_device(A), to_device(mat2),
               group_size, to_device(sz))
    assert out.shape == (M, N) and out.dtype == dtype
    expected = reference.weight_int4pack_mm(A.double(), mat2, group_size, sz.double())
    assert_matches(out, expected, dtype)


def test_weight_int4pack_mm_errors():
    mat2, sz = quantize.quantize_int4pack(torch.randn(8, 64), 32)
    A = to_device(torch.randn(1, 64))
    fn = lib.aoti_torch_mps__weight_int4pack_mm
    assert "aoti_torch_mps__weight_int4pack_mm: _weight_int4pack_mm: mat2 must be int32" in failure(
        fn, A, to_device(mat2.view(torch.float32)), 32, to_device(sz))
    assert "_weight_int4pack_mm: qScaleAndZeros must have shape [2, 8, 2]" in failure(
        fn, A, to_device(mat2), 32, to_device(sz[:, :4]))
    assert "_weight_int4pack_mm: mat2 holds" in failure(fn, to_device(torch.randn(1, 32)), to_device(mat2), 32,
                              to_device(sz))


# --- torch's _weight_int8pack_mm ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,K,N", [(1, 100, 7), (1, 512, 64), (13, 37, 33), (4, 64, 5), (3, 1100, 40)])
def test_weight_int8pack_mm(dtype, M, K, N):
    g = torch.Generator().manual_seed(K + N)
    w = torch.randn(N, K, generator=g)
    A = torch.randn(M, K, generator=g).to(dtype)
    mat2, scales = quantize.quantize_int8pack(w, dtype)
    out = call(lib.aoti_torch_mps__weight_int8pack_mm, to_device(A), to_device(mat2), to_device(scales))
    assert out.shape == (M, N) and out.dtype == dtype
    expected = (A.double() @ mat2.double().t()) * scales.double()
    assert_matches(out, expected, dtype)
    if dtype == torch.float32:  # torch's CPU kernel crashes on some bfloat16 shapes
        assert_matches(torch.ops.aten._weight_int8pack_mm(A, mat2, scales), expected, dtype)


def test_weight_int8pack_mm_errors():
    A = to_device(torch.randn(2, 16))
    mat2, scales = quantize.quantize_int8pack(torch.randn(4, 16))
    fn = lib.aoti_torch_mps__weight_int8pack_mm
    assert "aoti_torch_mps__weight_int8pack_mm: _weight_int8pack_mm: mat2 must have K = 16 columns, got 8" in failure(
        fn, A, to_device(mat2[:, :8].contiguous()), to_device(scales))
    assert "_weight_int8pack_mm: scales must have N = 4 elements, got 3" in failure(fn, A, to_device(mat2),
                                                                to_device(scales[:3]))
    args = [A, to_device(mat2), to_device(scales)]
    assert fn(*handles(args), ffi.NULL) == 1
    assert "ret0 is null" in etmetal_py.last_error()
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()


def live_allocations():
    etmetal_py.synchronize()
    gc.collect()
    stats = ffi.new("etmetal_allocator_stats_t*")
    etmetal_py.check(lib.etmetal_allocator_stats(stats))
    return stats.live_bytes, stats.live_allocations


def test_repeated_calls_do_not_grow_device_memory():
    """Outputs and inputs are released once their handles are deleted. (The stream keeps the
    last dispatch's bindings alive until the next one, so compare after a warm-up call.)"""
    A, q, S, Z = random_lowbit(1, 64, 8, 2, 32, torch.float32)
    B = quantize.pack_lowbit(q, 2)
    linear_lowbit(2, A, B, 32, S, Z)
    before = live_allocations()
    for _ in range(3):
        assert linear_lowbit(2, A, B, 32, S, Z).shape == (1, 8)
    assert live_allocations() == before


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", range(1, 8))
@pytest.mark.parametrize("M,K,N,group_size", LOWBIT_SHAPES + [(1, 640, 8198, 32), (81, 8, 4, 256),
                                                            (64, 2048, 96, 128)])
def test_lowbit_grid(dtype, bits, M, K, N, group_size):
    A, q, S, Z = random_lowbit(M, K, N, bits, group_size, dtype, seed=bits * 7 + M)
    out = linear_lowbit(bits, A, quantize.pack_lowbit(q, bits), group_size, S, Z)
    assert_matches(out, expected_lowbit(A, q, S, Z, group_size), dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("M,K,N", [(1, 4096, 1024), (3, 1024, 264), (70, 768, 136)])
def test_int4pack_and_int8pack_grid(dtype, group_size, M, K, N):
    g = torch.Generator().manual_seed(group_size + M)
    w = torch.randn(N, K, generator=g)
    A = torch.randn(M, K, generator=g).to(dtype)
    mat2, sz = quantize.quantize_int4pack(w, group_size, dtype)
    out = call(lib.aoti_torch_mps__weight_int4pack_mm, to_device(A), to_device(mat2), group_size, to_device(sz))
    assert_matches(out, reference.weight_int4pack_mm(A.double(), mat2, group_size, sz.double()),
                   dtype)
    q8, scales = quantize.quantize_int8pack(w, dtype)
    out = call(lib.aoti_torch_mps__weight_int8pack_mm, to_device(A), to_device(q8), to_device(scales))
    assert_matches(out, (A.double() @ q8.double().t()) * scales.double(), dtype)
