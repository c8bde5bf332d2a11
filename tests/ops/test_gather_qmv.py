"""aoti_torch_mps_gather_qmv (MoE expert-indexed 4-bit matrix-vector products) against a
float64 dequantize-and-multiply reference on the same inputs, and the registered torch op
metal::gather_qmv (its CPU reference kernel) against the same.

Tolerances relative to the output's scale: float32 1e-5, float16 2e-3, bfloat16 1e-2 (the
kernel accumulates in float32; the stored result is rounded to the activation dtype)."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.ops import quantize
from ops_testing import assert_close_scaled, poisoning_failure, reinterpret, to_device

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def run(x, w, s, z, indices, group_size):
    args = [to_device(x), to_device(w), to_device(s), to_device(z), to_device(indices)]
    out = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps_gather_qmv(*[a.handle for a in args], group_size, out)
    etmetal_py.check(code)
    return Tensor(out[0]).torch()


def failure(x, w, s, z, indices, group_size):
    args = [to_device(x), to_device(w), to_device(s), to_device(z), to_device(indices)]
    out = ffi.new("AtenTensorHandle*")
    return poisoning_failure(lib.aoti_torch_mps_gather_qmv(*[a.handle for a in args], group_size, out))


def experts(E, N, K, group_size, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    groups = -(-K // group_size)
    q = torch.randint(0, 16, (E, N, K), generator=g, dtype=torch.uint8)
    s = (torch.rand(E, N, groups, generator=g) * 0.1 + 0.01).to(dtype)
    z = (torch.rand(E, N, groups, generator=g) - 0.5).to(dtype)
    return q, quantize.pack_lowbit(q, 4), s, z


def expected(x, q, s, z, indices, group_size):
    K = x.shape[1]
    rows = []
    for p, e in enumerate(indices.tolist()):
        w = s[e].double().repeat_interleave(group_size, 1)[:, :K] * q[e].double() \
            + z[e].double().repeat_interleave(group_size, 1)[:, :K]
        rows.append(w @ x[p].double())
    return torch.stack(rows)


def assert_matches(actual, reference, dtype):
    assert_close_scaled(actual, reference, TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_dtypes_and_index_types(dtype, index_dtype):
    E, N, K, P, gs = 4, 20, 256, 6, 64
    q, w, s, z = experts(E, N, K, gs, dtype, seed=1)
    x = torch.randn(P, K).to(dtype)
    indices = torch.tensor([3, 0, 3, 1, 2, 0], dtype=index_dtype)
    out = run(x, w, s, z, indices, gs)
    assert out.shape == (P, N) and out.dtype == dtype
    assert_matches(out, expected(x, q, s, z, indices, gs), dtype)


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
@pytest.mark.parametrize("P,N,K", [(1, 8, 512), (5, 13, 264), (3, 1, 1000), (9, 37, 40)])
def test_group_sizes_and_tails(group_size, P, N, K):
    """N not a multiple of the 8-row tile, K not a multiple of the 512-value step nor of the
    group size (the last group is partial)."""
    E = 3
    q, w, s, z = experts(E, N, K, group_size, torch.float32, seed=P * N + group_size)
    x = torch.randn(P, K)
    indices = torch.randint(0, E, (P,), dtype=torch.int64)
    assert_matches(run(x, w, s, z, indices, group_size),
                   expected(x, q, s, z, indices, group_size), torch.float32)


def test_strided_activations_and_indices():
    E, N, K, P, gs = 2, 16, 128, 4, 32
    q, w, s, z = experts(E, N, K, gs, torch.float32, seed=3)
    x_t = torch.randn(K, P)
    indices_wide = torch.tensor([[1, 9], [0, 9], [1, 9], [1, 9]], dtype=torch.int32)
    x_dev, idx_dev = to_device(x_t), to_device(indices_wide)
    views = [reinterpret(x_dev, [P, K], [1, P]), reinterpret(idx_dev, [P], [2])]
    rest = [to_device(w), to_device(s), to_device(z)]
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_gather_qmv(views[0].handle, *[r.handle for r in rest],
                                                   views[1].handle, gs, out))
    indices = indices_wide[:, 0]
    assert_matches(Tensor(out[0]).torch(), expected(x_t.t(), q, s, z, indices, gs), torch.float32)


def test_out_of_range_index_is_reported_and_reads_nothing():
    """A pair whose expert index is outside [0, E) reads no weights and gets a zero row; the
    other pairs are unaffected, and the next synchronize reports the first bad index."""
    E, N, K, gs = 2, 8, 64, 32
    q, w, s, z = experts(E, N, K, gs, torch.float32, seed=5)
    x = torch.randn(3, K)
    for dtype in (torch.int64, torch.int32):
        indices = torch.tensor([1, 7, -1], dtype=dtype)
        args = [to_device(x), to_device(w), to_device(s), to_device(z), to_device(indices)]
        handle = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch_mps_gather_qmv(*[a.handle for a in args], gs, handle))
        out = Tensor(handle[0])
        with pytest.raises(etmetal_py.EtmetalError, match=r"ExpertIndices\[(1\] = 7|2\] = -1) is outside \[0, 2\)"):
            etmetal_py.synchronize()
        result = out.torch()  # the error was reported once; the stream is clean again
        assert_matches(result[0:1], expected(x[0:1], q, s, z, indices[0:1].long(), gs), torch.float32)
        assert torch.equal(result[1:], torch.zeros(2, N))


def test_registered_op_reference():
    E, N, K, P, gs = 3, 12, 128, 5, 64
    w_float = torch.randn(E, N, K)
    w, s, z = quantize.quantize_experts_4bit(w_float, gs)
    x = torch.randn(P, K)
    indices = torch.tensor([2, 2, 0, 1, 0], dtype=torch.int32)
    reference = torch.ops.metal.gather_qmv(x, w, s, z, indices, gs)
    q = quantize.unpack_lowbit(w, 4, K)
    assert_matches(reference, expected(x, q, s, z, indices, gs), torch.float32)
    assert_matches(run(x, w, s, z, indices, gs), reference.double(), torch.float32)
    # The quantized experts approximate the float ones within half a quantization step.
    restored = quantize.dequantize_affine(w, s, z, 4, K, gs)
    assert bool(((restored - w_float).abs() <= s.repeat_interleave(gs, -1) / 2 + 1e-6).all())


def test_argument_errors():
    E, N, K, gs = 2, 8, 64, 32
    q, w, s, z = experts(E, N, K, gs, torch.float32, seed=6)
    x = torch.randn(2, K)
    idx = torch.tensor([0, 1], dtype=torch.int32)
    assert "aoti_torch_mps_gather_qmv: gather_qmv: group_size must be 32, 64, 128 or 256, got 16" in failure(
        x, w, s, z, idx, 16)
    assert "gather_qmv: ExpertIndices must be int32 or int64, got float32" in failure(x, w, s, z, idx.float(), gs)
    assert "gather_qmv: ExpertIndices must have P = 2 elements, got 1" in failure(x, w, s, z, idx[:1], gs)
    assert "gather_qmv: W must have K / 2 = 32 bytes per row, got 16" in failure(
        x, w[:, :, :16].contiguous(), s, z, idx, gs)
    assert "gather_qmv: S must have X's dtype float32, got float16" in failure(x, w, s.half(), z, idx, gs)
    assert "gather_qmv: Z must have shape [2, 8, 2], got [2, 8, 1]" in failure(
        x, w, s, z[:, :, :1].contiguous(), idx, gs)
    assert "gather_qmv: K (X.size(1)) must be a positive multiple of 8" in failure(torch.randn(2, 12), w, s, z, idx, gs)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_moe_sized_grid(dtype, group_size):
    """Decoder-sized experts: 16 experts, K = 2048, N = 512, 64 token-expert pairs."""
    E, N, K, P = 16, 512, 2048, 64
    q, w, s, z = experts(E, N, K, group_size, dtype, seed=group_size)
    x = torch.randn(P, K).to(dtype)
    indices = torch.randint(0, E, (P,), dtype=torch.int64)
    assert_matches(run(x, w, s, z, indices, group_size),
                   expected(x, q, s, z, indices, group_size), dtype)
