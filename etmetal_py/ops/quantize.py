"""Quantize float weights into the packed layouts etmetal's quantized ops read, and unpack
them again (for references and tests).

Layouts:
- torchao low-bit (``_linear_fp_act_{bits}bit_weight``, bits 1..7): ``B`` uint8
  ``[N, bits * K / 8]``, each row one little-endian bit stream (value k at bit ``k * bits``);
  ``S``, ``Z`` ``[N, ceil(K / group_size)]``; ``w = S * q + Z``.
- MLX affine 4-bit experts (``metal::gather_qmv``): the 4-bit layout above per expert,
  ``W [E, N, K / 2]``, ``S``, ``Z`` ``[E, N, ceil(K / group_size)]``.
- torch int4pack on MPS (``aten._weight_int4pack_mm``): the bytes ``[N, K / 2]`` (even k in
  the low nibble) viewed as int32 ``[N / 8, K / (16 * inner_k_tiles), 32, inner_k_tiles / 2]``;
  ``scales_and_zeros [ceil(K / group_size), N, 2]``; ``w = scale * (q - 8) + zero``.
- torch int8pack (``aten._weight_int8pack_mm``): int8 ``[N, K]``, per-row ``scales [N]``.
"""

from __future__ import annotations

import torch

GROUP_SIZES = (32, 64, 128, 256)


def _check_group_size(group_size: int) -> None:
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")


def _check_matrix(w: torch.Tensor, name: str = "w") -> None:
    if w.dim() != 2:
        raise ValueError(f"{name} must be 2-D [N, K], got shape {tuple(w.shape)}")


def pack_lowbit(q: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 values ``q [..., K]`` (each < 2**bits) -> uint8 ``[..., bits * K / 8]``."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits must be 1..8, got {bits}")
    K = q.shape[-1]
    if K % 8:
        raise ValueError(f"K must be a multiple of 8, got {K}")
    if q.numel() and int(q.max()) >= 1 << bits:
        raise ValueError(f"values do not fit in {bits} bits")
    shifts = torch.arange(bits, dtype=torch.int32)
    stream = (q.to(torch.int32).unsqueeze(-1) >> shifts) & 1           # [..., K, bits]
    stream = stream.reshape(*q.shape[:-1], K * bits // 8, 8)
    weights = 1 << torch.arange(8, dtype=torch.int32)
    return (stream * weights).sum(-1).to(torch.uint8).contiguous()


def unpack_lowbit(packed: torch.Tensor, bits: int, K: int) -> torch.Tensor:
    """Inverse of :func:`pack_lowbit`: uint8 ``[..., bits * K / 8]`` -> uint8 ``[..., K]``."""
    if packed.shape[-1] * 8 != bits * K:
        raise ValueError(f"{packed.shape[-1]} bytes per row do not hold {K} {bits}-bit values")
    if 8 % bits == 0:
        # Whole values per byte (1, 2, 4 bits): shift each byte.
        shifts = torch.arange(0, 8, bits, dtype=torch.uint8)
        values = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
        return values.reshape(*packed.shape[:-1], K)
    # Every 8 values fill `bits` whole bytes: read each octet as one integer, then shift.
    octets = packed.to(torch.int64).reshape(*packed.shape[:-1], K // 8, bits)
    octets = (octets << (8 * torch.arange(bits, dtype=torch.int64))).sum(-1, keepdim=True)
    values = (octets >> (bits * torch.arange(8, dtype=torch.int64))) & ((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], K).to(torch.uint8)


def _affine_groups(w: torch.Tensor, levels: int, group_size: int):
    """Min/max affine quantization along the last dim in groups: (q, scale, minimum)."""
    *lead, K = w.shape
    groups = -(-K // group_size)
    padded = torch.nn.functional.pad(w.float(), (0, groups * group_size - K))
    grouped = padded.reshape(*lead, groups, group_size)
    # Padding must not widen a group's range: use the real values' min/max.
    valid = (torch.arange(groups * group_size) < K).reshape(groups, group_size)
    big = torch.finfo(torch.float32).max
    low = torch.where(valid, grouped, torch.full_like(grouped, big)).amin(-1)
    high = torch.where(valid, grouped, torch.full_like(grouped, -big)).amax(-1)
    scale = (high - low) / (levels - 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((grouped - low.unsqueeze(-1)) / scale.unsqueeze(-1)).clamp(0, levels - 1)
    q = q.reshape(*lead, groups * group_size)[..., :K].to(torch.uint8)
    return q, scale, low


def quantize_lowbit(w: torch.Tensor, bits: int, group_size: int, dtype: torch.dtype | None = None):
    """torchao low-bit layout of ``w [N, K]``: returns ``(B, S, Z)`` with ``w ~= S * q + Z``;
    S and Z in ``dtype`` (default ``w.dtype``)."""
    _check_matrix(w)
    _check_group_size(group_size)
    if not 1 <= bits <= 7:
        raise ValueError(f"bits must be 1..7, got {bits}")
    dtype = dtype or w.dtype
    q, scale, low = _affine_groups(w, 1 << bits, group_size)
    return pack_lowbit(q, bits), scale.to(dtype).contiguous(), low.to(dtype).contiguous()


def quantize_experts_4bit(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None):
    """MLX affine 4-bit layout of expert weights ``w [E, N, K]``: ``(W, S, Z)``."""
    if w.dim() != 3:
        raise ValueError(f"w must be 3-D [E, N, K], got shape {tuple(w.shape)}")
    _check_group_size(group_size)
    dtype = dtype or w.dtype
    q, scale, low = _affine_groups(w, 16, group_size)
    return pack_lowbit(q, 4), scale.to(dtype).contiguous(), low.to(dtype).contiguous()


def dequantize_affine(packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, bits: int,
                      K: int, group_size: int) -> torch.Tensor:
    """float32 ``[..., N, K]`` from the torchao / MLX affine layout (``S * q + Z``)."""
    q = unpack_lowbit(packed, bits, K).float()
    s = scales.float().repeat_interleave(group_size, dim=-1)[..., :K]
    z = zeros.float().repeat_interleave(group_size, dim=-1)[..., :K]
    return s * q + z


def _inner_k_tiles(K: int) -> int:
    for tiles in (8, 4, 2):
        if K % (16 * tiles) == 0:
            return tiles
    raise ValueError(f"K must be a multiple of 32 for the int4pack layout, got {K}")


def quantize_int4pack(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None):
    """torch's MPS int4pack layout of ``w [N, K]`` (N a multiple of 8, K of 32):
    ``(mat2, scales_and_zeros)`` for ``aten._weight_int4pack_mm``."""
    _check_matrix(w)
    _check_group_size(group_size)
    N, K = w.shape
    if N % 8:
        raise ValueError(f"N must be a multiple of 8 for the int4pack layout, got {N}")
    tiles = _inner_k_tiles(K)
    dtype = dtype or w.dtype
    q, scale, low = _affine_groups(w, 16, group_size)
    zero = low + 8 * scale                      # w = scale * (q - 8) + zero
    nibbles = q.to(torch.int32)
    rows = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8).contiguous()
    mat2 = rows.view(torch.int32).reshape(N // 8, K // (16 * tiles), 32, tiles // 2)
    scales_and_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).to(dtype).contiguous()
    return mat2.contiguous(), scales_and_zeros


def int4pack_values(mat2: torch.Tensor, K: int) -> torch.Tensor:
    """The 4-bit values ``[N, K]`` (uint8) held by an MPS int4pack ``mat2``."""
    rows = mat2.contiguous().view(torch.uint8).reshape(-1, K // 2)
    values = torch.stack([rows & 0xF, rows >> 4], dim=-1)
    return values.reshape(rows.shape[0], K)


def quantize_int8pack(w: torch.Tensor, dtype: torch.dtype | None = None):
    """Per-row symmetric int8 of ``w [N, K]``: ``(mat2 int8 [N, K], scales [N])``."""
    _check_matrix(w)
    dtype = dtype or w.dtype
    scale = w.float().abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w.float() / scale.unsqueeze(1)).clamp(-128, 127).to(torch.int8)
    return q.contiguous(), scale.to(dtype).contiguous()
