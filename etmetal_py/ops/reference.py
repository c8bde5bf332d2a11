"""Reference implementations (torch, CPU) of etmetal's quantized and custom ops: what the
Metal kernels must compute, and the CPU kernels of the registered torch ops."""

from __future__ import annotations

import torch

from .quantize import dequantize_affine, int4pack_values


def linear_lowbit(A: torch.Tensor, B: torch.Tensor, group_size: int, S: torch.Tensor,
                  Z: torch.Tensor, bits: int) -> torch.Tensor:
    """torchao ``_linear_fp_act_{bits}bit_weight``: ``A @ (S * q + Z)^T`` in A's dtype."""
    K = A.shape[1]
    w = dequantize_affine(B, S, Z, bits, K, group_size)
    return (A.float() @ w.t()).to(A.dtype)


def weight_int4pack_mm(A: torch.Tensor, mat2: torch.Tensor, group_size: int,
                       scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """``aten._weight_int4pack_mm`` with the MPS layout: ``A @ (scale * (q - 8) + zero)^T``."""
    K = A.shape[1]
    q = int4pack_values(mat2, K).float()
    scale = scales_and_zeros[..., 0].float().t().repeat_interleave(group_size, dim=1)[:, :K]
    zero = scales_and_zeros[..., 1].float().t().repeat_interleave(group_size, dim=1)[:, :K]
    return (A.float() @ (scale * (q - 8) + zero).t()).to(A.dtype)


def weight_int8pack_mm(A: torch.Tensor, mat2: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return ((A.float() @ mat2.float().t()) * scales.float()).to(A.dtype)


def gather_qmv(x: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor,
               expert_indices: torch.Tensor, group_size: int) -> torch.Tensor:
    """``y[p] = x[p] @ dequant(w[expert_indices[p]])^T`` (MLX affine 4-bit experts)."""
    P, K = x.shape
    E, N = w.shape[:2]
    indices = expert_indices.to(torch.int64)
    if P and (int(indices.min()) < 0 or int(indices.max()) >= E):
        raise IndexError(f"gather_qmv: expert index out of range [0, {E})")
    y = torch.zeros(P, N, dtype=torch.float32)
    for expert in torch.unique(indices).tolist():
        rows = indices == expert
        weight = dequantize_affine(w[expert], scales[expert], biases[expert], 4, K, group_size)
        y[rows] = x[rows].float() @ weight.t()
    return y.to(x.dtype)


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """Sequential gated delta rule; updates ``state [B, Hv, Dv, Dk]`` in place and returns
    ``y [B, T, Hv, Dv]`` in q's dtype. Value head h reads key head ``h // (Hv // Hk)``."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[-2:]
    if Hv % Hk:
        raise ValueError(f"gated_delta_rule: Hk={Hk} does not divide Hv={Hv}")
    repeat = Hv // Hk
    qf = q.float().repeat_interleave(repeat, dim=2)
    kf = k.float().repeat_interleave(repeat, dim=2)
    s = state.float().clone()
    ys = []
    for t in range(T):
        s = s * g[:, t].float()[:, :, None, None]
        k_t = kf[:, t]                                             # [B, Hv, Dk]
        kv = (s * k_t[:, :, None, :]).sum(-1)                      # [B, Hv, Dv]
        delta = (v[:, t].float() - kv) * beta[:, t].float()[:, :, None]
        s = s + delta[:, :, :, None] * k_t[:, :, None, :]
        ys.append((s * qf[:, t][:, :, None, :]).sum(-1))
    state.copy_(s.to(state.dtype))
    if not ys:
        return torch.empty(B, 0, Hv, Dv, dtype=q.dtype)
    return torch.stack(ys, dim=1).to(q.dtype)
