"""aoti_torch_mps__scaled_dot_product_fused_attention_overrideable against torch: the output
against the math backend (aten._scaled_dot_product_attention_math in float64 on the same
rounded inputs), the log-sum-exp against torch.logsumexp of the float64 scores, and every
returned shape, dtype and stride against torch's meta function. torch has no eager kernel
for this op (it is left to out-of-tree backends), so those are the references."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.tensors import dtype_code
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

TOLERANCE = {torch.float32: 2e-5, torch.float16: 3e-3}


def call_fused(q, k, v, bias=None, causal=False, scale=None, dropout_p=0.0):
    """(code, outputs): the 9 results, tensors as etmetal Tensors (None where NULL)."""
    keep = [as_device(q), as_device(k), as_device(v)]
    bias_arg = ffi.NULL
    if bias is not None:
        keep.append(as_device(bias))
        bias_arg = ffi.new("AtenTensorHandle*", keep[-1].handle)
    scale_arg = ffi.new("double*", scale) if scale is not None else ffi.NULL
    handles = [ffi.new("AtenTensorHandle*") for _ in range(7)]
    ints = [ffi.new("int64_t*", -1) for _ in range(2)]
    code = lib.aoti_torch_mps__scaled_dot_product_fused_attention_overrideable(
        keep[0].handle, keep[1].handle, keep[2].handle, bias_arg, dropout_p, int(causal), 0, scale_arg,
        handles[0], handles[1], handles[2], handles[3], ints[0], ints[1], handles[4], handles[5], handles[6])
    if code != 0:
        return code, None
    tensors = [Tensor(h[0]) if h[0] != ffi.NULL else None for h in handles]
    return code, tensors[:4] + [ints[0][0], ints[1][0]] + tensors[4:]


def scores(q, k, bias, causal, scale):
    q64, k64 = q.double(), k.double().repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q64 @ k64.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if bias is not None:
        s = s + (torch.where(bias, 0.0, float("-inf")) if bias.dtype == torch.bool else bias.double())
    return s


def reference_output(q, k, v, bias, causal, scale):
    groups = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    if bias is not None:
        bias = (torch.where(bias, 0.0, float("-inf")) if bias.dtype == torch.bool else bias).double()
    return torch.ops.aten._scaled_dot_product_attention_math(
        q.double(), k.double(), v.double(), bias, 0.0, causal, None, scale=scale)[0]


def meta_outputs(q, k, v, bias, causal, scale):
    def meta(t):
        return None if t is None else torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        meta(q), meta(k), meta(v), meta(bias), 0.0, causal, False, scale=scale)


def check(q, k, v, bias=None, causal=False, scale=None):
    code, outs = call_fused(q, k, v, bias, causal, scale)
    assert code == 0, etmetal_py.last_error()
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug = outs
    meta = meta_outputs(q, k, v, bias, causal, scale)
    assert (cum_q, cum_k, debug) == (None, None, None)
    assert (max_q, max_k) == (meta[4], meta[5]) == (q.shape[-2], k.shape[-2])
    for mine, theirs in ((out, meta[0]), (lse, meta[1]), (seed, meta[6]), (offset, meta[7])):
        assert mine.sizes == tuple(theirs.shape)
        assert mine.dtype == dtype_code(theirs.dtype)
        if theirs.numel() > 1:
            assert mine.strides == theirs.stride()
    assert seed.torch().item() == 0 and offset.torch().item() == 0
    got = out.torch()
    torch.testing.assert_close(got.double(), reference_output(q, k, v, bias, causal, scale),
                               atol=TOLERANCE[q.dtype], rtol=0)
    want_lse = torch.logsumexp(scores(q, k, bias, causal, scale), dim=-1).reshape(meta[1].shape)
    magnitude = want_lse.abs().max().item() if want_lse.numel() else 1.0
    torch.testing.assert_close(lse.torch().double(), want_lse, atol=2e-5 * max(1.0, magnitude), rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_4d_with_bias_and_gqa(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 16).to(dtype), torch.randn(2, 2, 11, 16).to(dtype),
               torch.randn(2, 2, 11, 8).to(dtype))
    check(q, k, v, bias=torch.randn(9, 11).to(dtype), scale=0.3)
    check(q, k, v, bias=torch.rand(2, 1, 9, 11) > 0.3)


def test_3d_causal_and_permuted_query_layout():
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 7, 32), torch.randn(3, 7, 32), torch.randn(3, 7, 32)
    check(q, k, v, causal=True)
    # [batch, rows, heads, dim] transposed, as models lay queries out: the output follows it.
    q4 = torch.randn(2, 5, 3, 16).transpose(1, 2)
    k4, v4 = torch.randn(2, 3, 6, 16), torch.randn(2, 3, 6, 16)
    check(q4, k4, v4)


def test_long_keys_split_and_empty():
    torch.manual_seed(2)
    check(torch.randn(1, 2, 1, 64), torch.randn(1, 2, 2000, 64), torch.randn(1, 2, 2000, 64))  # decode
    check(torch.randn(1, 2, 0, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16))
    code, outs = call_fused(torch.randn(1, 2, 3, 16), torch.randn(1, 2, 0, 16), torch.randn(1, 2, 0, 16))
    assert code == 0, etmetal_py.last_error()
    assert torch.equal(outs[0].torch(), torch.zeros(1, 2, 3, 16))
    assert torch.equal(outs[1].torch(), torch.full((1, 2, 3), float("-inf")))
    for t in outs[:2] + outs[6:8]:
        t.delete()


def test_bad_input():
    q = torch.randn(1, 2, 3, 16)
    poisoning_failure(call_fused(q, q, q, dropout_p=0.1)[0],
                      "aoti_torch_mps__scaled_dot_product_fused_attention_overrideable",
                      "dropout_p = 0.1 is not supported")
    poisoning_failure(call_fused(q[0, 0], q[0, 0], q[0, 0])[0], "query must be 3D or 4D")
    poisoning_failure(call_fused(q, torch.randn(1, 2, 3, 8), q)[0], "key head_dim 8")
    check(q, q, q)  # the process and the stream keep going
