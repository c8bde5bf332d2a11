"""aoti_torch_mps__scaled_dot_product_attention_math_for_mps{,_v2} against torch's math
backend (aten._scaled_dot_product_attention_math, float64 on the same rounded inputs).

Tolerances (absolute, outputs and weights are O(1)): float32 2e-5, float16 3e-3, bfloat16
2e-2: scores and softmax accumulate in float32, only the stored results are rounded."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails
from ops_testing import as_device, no_leaks_in_module, random  # noqa: F401 (autouse fixture)

TOLERANCE = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def run_sdpa(q, k, v, mask=None, causal=False, scale=None, dropout_p=0.0, v2=None):
    """(code, output, weights) of the etmetal call on device copies of the inputs."""
    tq, tk, tv = as_device(q), as_device(k), as_device(v)
    tm = as_device(mask) if mask is not None else None
    mask_arg = ffi.new("AtenTensorHandle*", tm.handle) if tm is not None else ffi.NULL
    scale_arg = ffi.new("double*", scale) if scale is not None else ffi.NULL
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    if v2 is None:
        code = lib.aoti_torch_mps__scaled_dot_product_attention_math_for_mps(
            tq.handle, tk.handle, tv.handle, mask_arg, dropout_p, int(causal), ffi.NULL,
            scale_arg, r0, r1)
    else:
        code = lib.aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
            tq.handle, tk.handle, tv.handle, mask_arg, dropout_p, int(causal), ffi.NULL,
            scale_arg, int(v2), r0, r1)
    if code != 0:
        return code, None, None
    out, weights = Tensor(r0[0]), Tensor(r1[0])
    return code, out.torch(), weights.torch()


def reference(q, k, v, mask=None, causal=False, scale=None):
    groups = q.shape[-3] // k.shape[-3]
    k = k.repeat_interleave(groups, dim=-3)
    v = v.repeat_interleave(groups, dim=-3)
    if mask is not None:
        # the math op adds its mask; torch's sdpa turns a boolean one into 0 / -inf first
        mask = (torch.where(mask, 0.0, float("-inf")) if mask.dtype == torch.bool else mask).double()
    out, weights = torch.ops.aten._scaled_dot_product_attention_math(
        q.double(), k.double(), v.double(), mask, 0.0, causal, None, scale=scale)
    return out, weights


def check(q, k, v, mask=None, causal=False, scale=None, v2=None, tolerance=None):
    code, out, weights = run_sdpa(q, k, v, mask, causal, scale, v2=v2)
    assert code == 0, etmetal_py.last_error()
    ref_out, ref_weights = reference(q, k, v, mask, causal, scale)
    tolerance = tolerance or TOLERANCE[q.dtype]
    assert out.dtype == q.dtype and weights.dtype == q.dtype
    assert out.shape == ref_out.shape and out.is_contiguous()
    assert weights.shape == ref_weights.shape and weights.is_contiguous()
    torch.testing.assert_close(out.double(), ref_out, atol=tolerance, rtol=0)
    torch.testing.assert_close(weights.double(), ref_weights, atol=tolerance, rtol=0)


DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# float32 by default; the half types with -m slow (the kernels are the same templates).
DTYPES_SLOW_HALVES = [torch.float32] + [pytest.param(d, marks=pytest.mark.slow) for d in DTYPES[1:]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,keys,head_dim,value_dim", [
    (1, 37, 64, 64),     # decode, keys not a multiple of anything
    (1, 300, 128, 128),  # decode over many splits
    (19, 19, 80, 80),    # prefill, head dim 80
    (5, 3, 8, 24),       # fewer keys than rows, value dim differs
    (7, 65, 256, 256),   # largest head dim
    (33, 9, 130, 7),     # head dim in the 256 class, small value dim
    (18, 50, 64, 32),    # prefill in blocks of four rows, a tail block of two
    (16, 16, 128, 128),  # prefill, largest head dim of the row blocks
])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_math_backend(dtype, rows, keys, head_dim, value_dim, causal):
    torch.manual_seed(rows * 1000 + keys + head_dim)
    q = random(2, 3, rows, head_dim, dtype=dtype)
    k = random(2, 3, keys, head_dim, dtype=dtype)
    v = random(2, 3, keys, value_dim, dtype=dtype)
    check(q, k, v, causal=causal)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [6, 18])  # 18: blocks of four rows per thread, and a tail
@pytest.mark.parametrize("mask_shape", [("L", 11), (1, 1, "L", 11), (2, 1, 1, 11), (4, 1, 11), (11,)])
def test_boolean_mask_broadcasts(dtype, rows, mask_shape):
    torch.manual_seed(len(mask_shape) + rows)
    mask_shape = tuple(rows if s == "L" else s for s in mask_shape)
    q, k, v = random(2, 4, rows, 32, dtype=dtype), random(2, 4, 11, 32, dtype=dtype), random(2, 4, 11, 32, dtype=dtype)
    mask = torch.rand(mask_shape) > 0.3
    mask[..., 0] = True  # every row keeps a key, so torch and etmetal agree on the softmax
    check(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype,mask_dtype", [
    (torch.float32, torch.float32), (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
    (torch.bfloat16, torch.float32),
])
def test_additive_mask(dtype, mask_dtype):
    torch.manual_seed(7)
    q, k, v = random(1, 2, 17, 16, dtype=dtype), random(1, 2, 40, 16, dtype=dtype), random(1, 2, 40, 16, dtype=dtype)
    mask = (torch.randn(1, 2, 17, 40) * 2).to(mask_dtype)
    mask[..., 5:9] = float("-inf")
    check(q, k, v, mask=mask)


def test_fully_masked_rows_give_zeros():
    torch.manual_seed(3)
    q, k, v = random(1, 2, 4, 16), random(1, 2, 70, 16), random(1, 2, 70, 16)
    mask = torch.rand(1, 2, 4, 70) > 0.5
    mask[0, 1, 2, :] = False
    code, out, weights = run_sdpa(q, k, v, mask=mask)
    assert code == 0
    assert torch.equal(out[0, 1, 2], torch.zeros(16))
    assert torch.equal(weights[0, 1, 2], torch.zeros(70))
    check(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads", [(8, 2), (6, 1), (4, 4)])
def test_grouped_query_heads(dtype, heads, kv_heads):
    torch.manual_seed(heads + kv_heads)
    q = random(2, heads, 3, 64, dtype=dtype)
    k, v = random(2, kv_heads, 50, 64, dtype=dtype), random(2, kv_heads, 50, 64, dtype=dtype)
    check(q, k, v, causal=True, v2=True)
    check(q, k, v)


@pytest.mark.parametrize("dtype", DTYPES_SLOW_HALVES)
@pytest.mark.parametrize("heads,kv_heads,mask_kind", [
    (32, 8, None),      # decode with GQA: the key range splits over many threadgroups
    (32, 1, "bool"),    # 32 query heads per key/value head: two head blocks of one group
    (20, 1, "additive"),  # a partial second head block
    (4, 4, "causal"),
])
def test_decode_splits_the_keys(dtype, heads, kv_heads, mask_kind):
    """One query row over a long KV cache: many key splits (and key blocks within a split,
    with a ragged last one) merged by the finishing pass."""
    torch.manual_seed(heads * 3 + kv_heads)
    keys, dim = 700, 32
    q = random(1, heads, 1, dim, dtype=dtype)
    k, v = random(1, kv_heads, keys, dim, dtype=dtype), random(1, kv_heads, keys, dim, dtype=dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(1, heads, 1, keys) > 0.5
        mask[..., :260] = False  # whole splits without a visible key
        mask[..., -1] = True
    elif mask_kind == "additive":
        mask = (torch.randn(1, 1, 1, keys) * 3).to(dtype)
        mask[..., 140:400] = float("-inf")
    check(q, k, v, mask=mask, causal=mask_kind == "causal")


@pytest.mark.parametrize("dtype", DTYPES_SLOW_HALVES)
@pytest.mark.parametrize("heads,kv_heads,rows", [(4, 4, 40), (8, 2, 37), (3, 1, 21)])
def test_prefill_row_blocks(dtype, heads, kv_heads, rows):
    """Several query rows per threadgroup (blocks of rows x heads), with partial blocks, over
    more than one key block; causal and not."""
    torch.manual_seed(rows)
    q = random(2, heads, rows, 32, dtype=dtype)
    k, v = random(2, kv_heads, 150, 32, dtype=dtype), random(2, kv_heads, 150, 32, dtype=dtype)
    check(q, k, v, causal=True)
    check(q, k, v)


@pytest.mark.parametrize("dtype", DTYPES_SLOW_HALVES)
@pytest.mark.parametrize("heads,kv_heads,rows,head_dim", [
    (2, 2, 70, 128),  # blocks of 48 rows: one full, one partial
    (80, 1, 3, 64),   # 64 heads of one key/value head per group, then a partial group of 16
    (8, 2, 37, 96),   # 4 heads x 12 rows per group, dimension class 128
])
def test_prefill_slot_groups(dtype, heads, kv_heads, rows, head_dim):
    """Head dims 64 and 128 give a group 64 and 48 (query row, head) slots and blocks of 22
    and 30 keys: full and partial slot groups over several key blocks, causal and not."""
    torch.manual_seed(rows + heads)
    q = random(1, heads, rows, head_dim, dtype=dtype)
    k = random(1, kv_heads, 150, head_dim, dtype=dtype)
    v = random(1, kv_heads, 150, head_dim, dtype=dtype)
    check(q, k, v, causal=True)
    check(q, k, v)


@pytest.mark.parametrize("causal", [False, True])
def test_prefill_48_slot_groups_half(causal):
    """Head dim 128 gives a group 48 (query row, head) slots and blocks of 30 keys: 4 heads x
    12 rows, three full row blocks and a partial one, over a ragged last key block. The
    weights are rescaled from float16 probabilities stored per (row, key block)."""
    torch.manual_seed(41)
    q = random(1, 8, 40, 128, dtype=torch.float16)
    k = random(1, 2, 100, 128, dtype=torch.float16)
    v = random(1, 2, 100, 128, dtype=torch.float16)
    check(q, k, v, causal=causal, v2=True)


def test_rows_longer_than_a_run_of_block_maxima():
    """2100 keys in blocks of 22 (64 slots: 4 heads x 16 rows) are 96 block maxima per row:
    the finishing pass stages them 64 at a time. One row block, so the keys are split (in
    whole key blocks: 16 splits of 132)."""
    torch.manual_seed(43)
    q = random(1, 4, 16, 64)
    k, v = random(1, 1, 2100, 64), random(1, 1, 2100, 64)
    check(q, k, v)


def test_decode_key_value_views_with_strides():
    """A KV cache read through a non-contiguous view (time-major storage, a slice of it)."""
    torch.manual_seed(5)
    cache_k = torch.randn(1, 700, 4, 48)  # [batch, time, kv_heads, dim]
    cache_v = torch.randn(1, 700, 4, 48)
    k, v = cache_k[:, 13:613].transpose(1, 2), cache_v[:, 13:613].transpose(1, 2)
    q = torch.randn(1, 16, 2, 48)[:, :, 1:]  # a row view with an offset
    check(q, k, v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_and_offset_views(dtype):
    torch.manual_seed(11)
    # [batch, rows, heads, dim] projections seen as [batch, heads, rows, dim]
    q = random(2, 13, 4, 32, dtype=dtype).transpose(1, 2)
    # a slice of a longer cache (storage offset) with a padded head dimension
    k = random(2, 4, 40, 48, dtype=dtype)[:, :, 5:30, :32]
    # value's head dimension is not unit-stride
    v = random(2, 4, 25, 32, dtype=dtype).transpose(-1, -2).contiguous().transpose(-1, -2)
    mask = (torch.rand(2, 1, 13, 25) > 0.2)[..., :]
    mask[..., 0] = True
    mask = mask.transpose(-1, -2).contiguous().transpose(-1, -2)  # non-unit key stride
    assert not q.is_contiguous() and k.storage_offset() > 0 and v.stride(-1) != 1
    check(q, k, v, mask=mask)
    check(q, k, v, causal=True)


@pytest.mark.parametrize("shape", [(3, 6, 16), (2, 2, 3, 6, 16), (1, 2, 1, 2, 5, 16)])
def test_batch_dimensions(shape):
    torch.manual_seed(len(shape))
    q = random(*shape)
    k = random(*shape[:-2], 9, 16)
    v = random(*shape[:-2], 9, 12)
    check(q, k, v)
    check(q, k, v, causal=True)


def test_explicit_scale():
    torch.manual_seed(5)
    q, k, v = random(1, 2, 4, 16), random(1, 2, 10, 16), random(1, 2, 10, 16)
    check(q, k, v, scale=0.37)
    check(q, k, v, scale=2.5, causal=True)


def test_large_scores_are_stable():
    # exp(score) overflows float32 here (scores ~ +-400); the online softmax subtracts the
    # running maximum. Scores that large carry ~1e-4 absolute rounding in float32.
    torch.manual_seed(9)
    q, k, v = random(1, 1, 3, 16) * 20, random(1, 1, 200, 16) * 20, random(1, 1, 200, 16)
    code, out, _ = run_sdpa(q, k, v)
    assert torch.isfinite(out).all()
    check(q, k, v, tolerance=5e-4)


def test_no_keys_gives_zero_output():
    q = random(1, 2, 3, 8)
    k, v = torch.empty(1, 2, 0, 8), torch.empty(1, 2, 0, 5)
    code, out, weights = run_sdpa(q, k, v)
    assert code == 0
    assert torch.equal(out, torch.zeros(1, 2, 3, 5)) and weights.shape == (1, 2, 3, 0)


def test_no_rows_gives_empty_outputs():
    q, k, v = torch.empty(1, 2, 0, 8), random(1, 2, 4, 8), random(1, 2, 4, 8)
    code, out, weights = run_sdpa(q, k, v)
    assert code == 0 and out.shape == (1, 2, 0, 8) and weights.shape == (1, 2, 0, 4)


def _call_fails(*fragments, **arguments):
    defaults = dict(q=random(1, 2, 3, 8), k=random(1, 2, 4, 8), v=random(1, 2, 4, 8))
    defaults.update(arguments)
    q, k, v = defaults.pop("q"), defaults.pop("k"), defaults.pop("v")
    code, _, _ = run_sdpa(q, k, v, **defaults)
    fails(code, "scaled_dot_product_attention", *fragments)
    with pytest.raises(etmetal_py.EtmetalError, match="dropout|must|not supported|differ|broadcast"):
        etmetal_py.synchronize()  # the failure poisoned the stream, as inside a model run
    etmetal_py.synchronize()  # and the sticky error was cleared


@pytest.mark.parametrize("case,fragments,arguments", [
    ("dropout", ["dropout_p"], dict(dropout_p=0.1)),
    ("mask and causal", ["attn_mask", "is_causal"],
     dict(mask=torch.ones(3, 4, dtype=torch.bool), causal=True)),
    ("heads", ["multiple"], dict(k=random(1, 3, 4, 8), v=random(1, 3, 4, 8))),
    ("dtype", ["dtype"], dict(k=random(1, 2, 4, 8, dtype=torch.float16))),
    ("integer", ["not supported"], dict(q=torch.ones(1, 2, 3, 8, dtype=torch.int32),
                                        k=torch.ones(1, 2, 4, 8, dtype=torch.int32),
                                        v=torch.ones(1, 2, 4, 8, dtype=torch.int32))),
    ("head dim", ["1..256"], dict(q=random(1, 1, 2, 300), k=random(1, 1, 2, 300), v=random(1, 1, 2, 300))),
    ("key dim", ["head_dim"], dict(k=random(1, 2, 4, 9))),
    ("batch", ["batch dimension"], dict(k=random(2, 2, 4, 8), v=random(2, 2, 4, 8))),
    ("mask shape", ["broadcast"], dict(mask=torch.ones(3, 5, dtype=torch.bool))),
    ("mask dtype", ["attn_mask dtype"], dict(mask=torch.ones(3, 4, dtype=torch.int64))),
    ("rank", ["dimensions"], dict(q=random(3, 8), k=random(4, 8), v=random(4, 8))),
])
def test_bad_arguments(case, fragments, arguments):
    _call_fails(*fragments, **arguments)


def test_null_result_pointer():
    q = Tensor.from_array(random(1, 1, 2, 8), copy=True)
    r = ffi.new("AtenTensorHandle*")
    fails(lib.aoti_torch_mps__scaled_dot_product_attention_math_for_mps(
        q.handle, q.handle, q.handle, ffi.NULL, 0.0, 0, ffi.NULL, ffi.NULL, r, ffi.NULL), "ret1")
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,keys", [(1, 1024), (1, 4097), (64, 64), (130, 257)])
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
def test_larger_grid(dtype, rows, keys, head_dim):
    torch.manual_seed(rows + keys + head_dim)
    q = random(1, 4, rows, head_dim, dtype=dtype)
    k, v = random(1, 2, keys, head_dim, dtype=dtype), random(1, 2, keys, head_dim, dtype=dtype)
    check(q, k, v)
    check(q, k, v, causal=True)
