"""torch registrations of etmetal's custom ops: ``metal::gather_qmv``,
``metal::gated_delta_rule`` (state mutated in place) and torchao's
``_linear_fp_act_{1..7}bit_weight`` / ``_pack_weight_{1..7}bit`` schemas where torchao does not
provide them. Each has a CPU kernel (the reference) and a fake kernel for export."""

from __future__ import annotations

import torch
from torch import Tensor

from . import reference
from .quantize import pack_lowbit

LOWBIT_WIDTHS = tuple(range(1, 8))


@torch.library.custom_op("metal::gather_qmv", mutates_args=())
def gather_qmv(x: Tensor, w: Tensor, scales: Tensor, biases: Tensor, expert_indices: Tensor,
               group_size: int) -> Tensor:
    """y[p] = x[p] @ dequant(w[expert_indices[p]])^T; x [P, K], w uint8 [E, N, K/2],
    scales/biases [E, N, ceil(K/group_size)], expert_indices int32/int64 [P]."""
    return reference.gather_qmv(x, w, scales, biases, expert_indices, group_size)


@gather_qmv.register_fake
def _(x, w, scales, biases, expert_indices, group_size):
    torch._check(x.dim() == 2 and w.dim() == 3, lambda: "gather_qmv: x [P, K], w [E, N, K/2]")
    torch._check(w.shape[2] * 2 == x.shape[1], lambda: "gather_qmv: w must hold K/2 bytes per row")
    return x.new_empty(x.shape[0], w.shape[1])


@torch.library.custom_op("metal::gated_delta_rule", mutates_args=("state",))
def gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                     state: Tensor) -> Tensor:
    """Gated delta rule over T steps; q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g, beta [B, T, Hv],
    state [B, Hv, Dv, Dk] (float32 or q's dtype) updated in place, accumulated in float;
    returns y [B, T, Hv, Dv]."""
    return reference.gated_delta_rule(q, k, v, g, beta, state)


@gated_delta_rule.register_fake
def _(q, k, v, g, beta, state):
    torch._check(q.dim() == 4 and v.dim() == 4, lambda: "gated_delta_rule: q, v are 4-D")
    return q.new_empty(q.shape[0], q.shape[1], v.shape[2], v.shape[3])


def _torchao_has(name: str) -> bool:
    try:
        getattr(torch.ops.torchao, name)
        return True
    except (AttributeError, RuntimeError):
        return False


_torchao_fragment = torch.library.Library("torchao", "FRAGMENT")


def _register_torchao_lowbit(bits: int) -> None:
    linear = f"_linear_fp_act_{bits}bit_weight"
    pack = f"_pack_weight_{bits}bit"
    if not _torchao_has(linear):
        _torchao_fragment.define(
            f"{linear}(Tensor A, Tensor B, int group_size, Tensor S, Tensor Z) -> Tensor")
        qualified = f"torchao::{linear}"
        torch.library.impl(qualified, "CPU", lib=_torchao_fragment)(
            lambda A, B, group_size, S, Z: reference.linear_lowbit(A, B, group_size, S, Z, bits))

        def fake(A, B, group_size, S, Z):
            torch._check(A.dim() == 2 and B.dim() == 2, lambda: f"{linear}: A, B are 2-D")
            return A.new_empty(A.shape[0], B.shape[0])

        torch.library.register_fake(qualified, fake, lib=_torchao_fragment)
    if not _torchao_has(pack):
        _torchao_fragment.define(f"{pack}(Tensor W) -> Tensor")
        torch.library.impl(f"torchao::{pack}", "CPU", lib=_torchao_fragment)(
            lambda W: pack_lowbit(W, bits))


for _bits in LOWBIT_WIDTHS:
    _register_torchao_lowbit(_bits)


def linear_lowbit_op(bits: int) -> torch._ops.OpOverload:
    """``torch.ops.torchao._linear_fp_act_{bits}bit_weight.default``."""
    return getattr(torch.ops.torchao, f"_linear_fp_act_{bits}bit_weight").default
