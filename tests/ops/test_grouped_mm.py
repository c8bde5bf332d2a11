"""aoti_torch_mps__grouped_mm against torch._grouped_mm (CPU eager): the four layouts (groups of
rows, of columns, of the depth, batches), float32 / float16 / bfloat16, transposed (strided)
operands as MoE experts pass them, empty groups, rows past the last end, and bad input.
test_compiled_fallbacks.py compiles a mixture-of-experts block that reaches it."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, assert_close_scaled, no_leaks_in_module, poisoning_failure  # noqa: F401

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def call(a, b, offs=None, bias=None, out_dtype=None):
    kept = [as_device(a), as_device(b)] + [as_device(t) for t in (offs, bias) if t is not None]
    offs_arg = ffi.new("AtenTensorHandle*", kept[2].handle) if offs is not None else ffi.NULL
    bias_arg = ffi.new("AtenTensorHandle*", kept[-1].handle) if bias is not None else ffi.NULL
    dtype_arg = ffi.new("int32_t*", out_dtype) if out_dtype is not None else ffi.NULL
    r0 = ffi.new("AtenTensorHandle*")
    return lib.aoti_torch_mps__grouped_mm(kept[0].handle, kept[1].handle, offs_arg, bias_arg, dtype_arg, r0), r0


def grouped_mm(a, b, offs=None):
    code, r0 = call(a, b, offs)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def offsets(*ends):
    return torch.tensor(ends, dtype=torch.int32)


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_layouts_match_torch(dtype):
    tolerance = TOLERANCE[dtype]
    a, experts = randn(10, 16, dtype=dtype, seed=1), randn(3, 24, 16, dtype=dtype, seed=2)
    b = experts.transpose(-2, -1)                          # [G, K, N], strided as MoE passes it
    ends = offsets(2, 2, 9)                                # an empty group; row 9 past the last end
    out = grouped_mm(a, b, ends)
    assert out.dtype == dtype and out.shape == (10, 24)
    assert_close_scaled(out[:9], torch._grouped_mm(a, b, offs=ends)[:9], tolerance)
    assert torch.equal(out[9], torch.zeros(24, dtype=dtype))
    a3, b2 = randn(3, 8, 16, dtype=dtype, seed=3), randn(16, 32, dtype=dtype, seed=4)
    column_ends = offsets(8, 24, 32)
    assert_close_scaled(grouped_mm(a3, b2, column_ends), torch._grouped_mm(a3, b2, offs=column_ends), tolerance)
    a2, b_depth = randn(16, 12, dtype=dtype, seed=5).t().contiguous().t(), randn(12, 16, dtype=dtype, seed=6)
    depth_ends = offsets(3, 3, 12)
    out = grouped_mm(a2, b_depth, depth_ends)
    assert out.shape == (3, 16, 16) and torch.equal(out[1], torch.zeros(16, 16, dtype=dtype))
    assert_close_scaled(out, torch._grouped_mm(a2, b_depth, offs=depth_ends), tolerance)
    assert_close_scaled(grouped_mm(a3, b), torch._grouped_mm(a3, b.contiguous()), tolerance)


def test_empty_operands():
    assert grouped_mm(torch.empty(0, 16), randn(2, 16, 8), offsets(0, 0)).shape == (0, 8)
    out = grouped_mm(torch.empty(4, 0), torch.empty(0, 8), offsets(0, 0))
    assert torch.equal(out, torch.zeros(2, 4, 8))


def test_bad_input():
    a, b, ends = randn(4, 8), randn(2, 8, 8), offsets(2, 4)
    poisoning_failure(call(a.int(), b.int(), ends)[0], "aoti_torch_mps__grouped_mm", "Float32, BFloat16 or Float16")
    poisoning_failure(call(a, b.half(), ends)[0], "same dtype")
    poisoning_failure(call(a, b, ends.long())[0], "Offsets have to be int32")
    poisoning_failure(call(a, b)[0], "Have to provide offsets")
    poisoning_failure(call(randn(2, 4, 8), b, ends)[0], "Have to provide offsets")
    poisoning_failure(call(a, randn(2, 4, 8), ends)[0], "contraction dimension")
    poisoning_failure(call(a, b, offsets(4))[0], "matrix batch sizes have to match")
    poisoning_failure(call(a, b, ends, bias=randn(2, 8))[0], "Bias not supported yet")
    poisoning_failure(call(a, b, ends, out_dtype=15)[0], "output dtype must match")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps__grouped_mm(ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, r0),
                      "null tensor handle")
