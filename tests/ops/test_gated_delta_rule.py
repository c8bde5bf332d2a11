"""aoti_torch_mps_gated_delta_rule against a float64 sequential reference on the same inputs:
the output y and the state left behind (updated in place, float32), for float32 / float16 /
bfloat16 inputs, grouped key heads, Dk from 32 to 1024 (register and streaming kernels), any
strides; a state in the input dtype (float16 / bfloat16, as ExecuTorch keeps it), accumulated
in float and rounded once at the end; and metal::gated_delta_rule (the registered torch op)
against the same reference.

Tolerances: the state and y are accumulated in float32 over T steps; relative to the largest
magnitude: float32 1e-5 (state) / 2e-5 (y), float16 y 2e-3, bfloat16 y 1e-2 (the stored y is
rounded to the input dtype; a float32 state 2e-5; a 16-bit state is the float64 state rounded
once to its dtype, within one rounding of it)."""

import pytest
import torch

import etmetal_py
import etmetal_py.ops  # noqa: F401  (registers metal::gated_delta_rule)
from etmetal_py import Tensor, ffi, lib
from ops_testing import assert_close_scaled, poisoning_failure, reinterpret, to_device

Y_TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
STATE_TOLERANCE = 2e-5


def inputs(B, T, Hk, Hv, Dk, Dv, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Normalized keys and gates in (0, 1) keep the recurrence bounded, as in real models.
    q = torch.randn(B, T, Hk, Dk, generator=g)
    k = torch.nn.functional.normalize(torch.randn(B, T, Hk, Dk, generator=g), dim=-1)
    v = torch.randn(B, T, Hv, Dv, generator=g)
    gate = torch.sigmoid(torch.randn(B, T, Hv, generator=g)) * 0.5 + 0.5
    beta = torch.sigmoid(torch.randn(B, T, Hv, generator=g))
    state = torch.randn(B, Hv, Dv, Dk, generator=g) * 0.1
    return [t.to(dtype) for t in (q, k, v, gate, beta)], state


def reference(q, k, v, g, beta, state):
    """float64 recurrence on the (already rounded) inputs; returns (y, final state)."""
    B, T, Hk, Dk = q.shape
    Hv = v.shape[2]
    r = Hv // Hk
    q, k = q.double().repeat_interleave(r, 2), k.double().repeat_interleave(r, 2)
    v, g, beta, s = v.double(), g.double(), beta.double(), state.double().clone()
    ys = []
    for t in range(T):
        s = s * g[:, t, :, None, None]
        kv = torch.einsum("bhvk,bhk->bhv", s, k[:, t])
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        s = s + delta[..., None] * k[:, t, :, None, :]
        ys.append(torch.einsum("bhvk,bhk->bhv", s, q[:, t]))
    return torch.stack(ys, 1), s


def run(tensors, state_device):
    handles = [to_device(t) for t in tensors]
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_gated_delta_rule(*[h.handle for h in handles],
                                                         state_device.handle, out))
    return Tensor(out[0]).torch()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    tensors, state = inputs(2, 5, 2, 4, 64, 32, dtype, seed=1)
    state_device = to_device(state)
    y = run(tensors, state_device)
    y_ref, state_ref = reference(*tensors, state)
    assert y.shape == (2, 5, 4, 32) and y.dtype == dtype
    assert_close_scaled(y, y_ref, Y_TOLERANCE[dtype])
    assert_close_scaled(state_device.torch(), state_ref, STATE_TOLERANCE)


@pytest.mark.parametrize("B,T,Hk,Hv,Dk,Dv", [
    (1, 1, 1, 1, 32, 32),       # one decode step
    (1, 9, 1, 3, 96, 64),       # three value heads share one key head
    (3, 4, 2, 2, 128, 96),      # Dk at the small register capacity
    (1, 3, 2, 4, 160, 32),      # the larger register capacity
    (1, 2, 1, 2, 544, 32),      # past the registers: streaming kernel
])
def test_shapes(B, T, Hk, Hv, Dk, Dv):
    tensors, state = inputs(B, T, Hk, Hv, Dk, Dv, torch.float32, seed=B * T + Dk)
    state_device = to_device(state)
    y = run(tensors, state_device)
    y_ref, state_ref = reference(*tensors, state)
    assert_close_scaled(y, y_ref, Y_TOLERANCE[torch.float32])
    assert_close_scaled(state_device.torch(), state_ref, STATE_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("Dk", [64, 160])  # both register capacities
def test_state_in_the_input_dtype(dtype, Dk):
    tensors, state = inputs(2, 7, 1, 2, Dk, 32, dtype, seed=Dk)
    state = state.to(dtype)
    state_device = to_device(state)
    y = run(tensors, state_device)
    y_ref, state_ref = reference(*tensors, state)
    assert y.dtype == dtype
    assert_close_scaled(y, y_ref, Y_TOLERANCE[dtype])
    result = state_device.torch()
    assert result.dtype == dtype
    # Float accumulation over all 7 steps, one rounding at the end: the result is the nearest
    # 16-bit value of the exact state up to one unit in the last place (rounding per step
    # would drift further).
    eps = torch.finfo(dtype).eps
    error = (result.double() - state_ref).abs()
    assert (error <= state_ref.abs() * eps + 1e-6).all(), float(error.max())


def test_state_carries_across_calls():
    """Two calls over halves of a sequence equal one call over all of it."""
    tensors, state = inputs(1, 6, 1, 2, 64, 32, torch.float32, seed=4)
    whole = to_device(state)
    y_whole = run(tensors, whole)
    split = to_device(state)
    y_first = run([t[:, :3].contiguous() for t in tensors], split)
    y_second = run([t[:, 3:].contiguous() for t in tensors], split)
    assert_close_scaled(torch.cat([y_first, y_second], 1), y_whole.double(), 1e-6)
    assert_close_scaled(split.torch(), whole.torch().double(), 1e-6)


def test_strided_inputs_and_state():
    """q/k/v in [B, H, T, D] memory order (transposed views) and a state in [B, Hv, Dk, Dv]
    memory order are read and written through their strides."""
    B, T, Hk, Hv, Dk, Dv = 1, 4, 2, 2, 64, 32
    (q, k, v, g, beta), state = inputs(B, T, Hk, Hv, Dk, Dv, torch.float32, seed=8)
    keep = []

    def transposed(x):  # x [B, T, H, D] stored as [B, H, T, D]
        base = to_device(x.transpose(1, 2).contiguous())
        keep.append(base)
        b, t, h, d = x.shape
        return reinterpret(base, [b, t, h, d], [h * t * d, d, t * d, 1])

    state_base = to_device(state.transpose(2, 3).contiguous())
    state_view = reinterpret(state_base, [B, Hv, Dv, Dk], [Hv * Dk * Dv, Dk * Dv, 1, Dv])
    args = [transposed(q), transposed(k), transposed(v), to_device(g), to_device(beta)]
    out = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_gated_delta_rule(*[a.handle for a in args],
                                                         state_view.handle, out))
    y_ref, state_ref = reference(q, k, v, g, beta, state)
    assert_close_scaled(Tensor(out[0]).torch(), y_ref, Y_TOLERANCE[torch.float32])
    assert_close_scaled(state_base.torch().transpose(2, 3), state_ref, STATE_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_registered_op_mutates_state(dtype):
    tensors, state = inputs(1, 3, 1, 2, 32, 32, dtype, seed=9)
    state = state.to(dtype)
    mutated = state.clone()
    y = torch.ops.metal.gated_delta_rule(*tensors, mutated)
    y_ref, state_ref = reference(*tensors, state)
    assert mutated.dtype == dtype
    assert_close_scaled(y, y_ref, Y_TOLERANCE[dtype])
    assert_close_scaled(mutated, state_ref, 1e-5 if dtype == torch.float32 else 1e-2)


def failure(tensors, state):
    handles = [to_device(t) for t in tensors] + [to_device(state)]
    out = ffi.new("AtenTensorHandle*")
    return poisoning_failure(lib.aoti_torch_mps_gated_delta_rule(*[h.handle for h in handles], out))


def test_argument_errors():
    (q, k, v, g, beta), state = inputs(1, 2, 2, 4, 64, 32, torch.float32)
    assert ("aoti_torch_mps_gated_delta_rule: gated_delta_rule: State must be float32 or Q's dtype float32, "
            "got bfloat16") in failure(
        [q, k, v, g, beta], state.bfloat16())
    half = [t.half() for t in (q, k, v, g, beta)]
    assert "gated_delta_rule: State must be float32 or Q's dtype float16, got bfloat16" in failure(
        half, state.bfloat16())
    wide = [torch.zeros(1, 1, 1, 544).half(), torch.zeros(1, 1, 1, 544).half(),
            torch.zeros(1, 1, 1, 32).half(), torch.ones(1, 1, 1).half(),
            torch.ones(1, 1, 1).half()]
    assert "gated_delta_rule: a float16 State needs Dk <= 512 (got 544); pass a float32 State" in failure(
        wide, torch.zeros(1, 1, 32, 544).half())
    assert "gated_delta_rule: Dk (Q.size(3)) must be a positive multiple of 32, got 48" in failure(
        [q[..., :48], k[..., :48], v, g, beta], state[..., :48])
    assert "gated_delta_rule: the key heads Hk = 2 must divide the value heads Hv = 3" in failure(
        [q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3]], state[:, :3])
    assert "gated_delta_rule: K must have Q's dtype float32, got float16" in failure([q, k.half(), v, g, beta], state)
    assert "gated_delta_rule: G must have shape [1, 2, 4] (B, T, Hv), got [1, 2, 3]" in failure(
        [q, k, v, g[..., :3], beta], state)
    assert "gated_delta_rule: State must have shape [1, 4, 32, 64]" in failure([q, k, v, g, beta], state[:, :, :16])
    assert "gated_delta_rule: Q must be float32, float16 or bfloat16, got float64" in failure(
        [q.double(), k, v, g, beta], state)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("Dk,Dv", [(128, 128), (256, 64), (1024, 32)])
def test_model_sized_grid(dtype, Dk, Dv):
    """Grouped heads (4 key heads shared by 8 value heads), model-sized rows, 64 steps."""
    tensors, state = inputs(1, 64, 4, 8, Dk, Dv, dtype, seed=Dk)
    state_device = to_device(state)
    y = run(tensors, state_device)
    y_ref, state_ref = reference(*tensors, state)
    assert_close_scaled(y, y_ref, Y_TOLERANCE[dtype])
    assert_close_scaled(state_device.torch(), state_ref, 1e-4)
