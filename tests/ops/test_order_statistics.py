"""aoti_torch_mps_kthvalue, _median and _nanmedian against torch eager: dtypes, dims, keepdim,
strided views, 0-dim tensors, NaN, ties, and bad input. test_compiled_fallbacks.py compiles
a model that reaches them."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8]


def sample(dtype, shape, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -100, 100, shape, generator=generator, dtype=dtype)


def call_kthvalue(x, k, dim, keepdim=False):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return lib.aoti_torch_mps_kthvalue(t.handle, k, dim, int(keepdim), r0, r1), r0, r1


def kthvalue(x, k, dim, keepdim=False):
    code, r0, r1 = call_kthvalue(x, k, dim, keepdim)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch(), Tensor(r1[0]).torch()


def check_kthvalue(x, k, dim, keepdim=False):
    values, indices = kthvalue(x, k, dim, keepdim)
    expected = torch.kthvalue(x, k, dim, keepdim)
    assert torch.equal(values, expected.values) or torch.allclose(values, expected.values, equal_nan=True)
    assert indices.shape == expected.indices.shape
    picked = x.gather(dim, indices if keepdim or x.dim() == 0 else indices.unsqueeze(dim))
    picked = picked if keepdim or x.dim() == 0 else picked.squeeze(dim)
    assert torch.equal(picked, values) or torch.allclose(picked, values, equal_nan=True)  # ties: any equal element


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kthvalue_matches_torch(dtype):
    x = sample(dtype, (5, 37, 3), 1)
    for k, dim, keepdim in ((1, 1, False), (19, 1, True), (37, 1, False), (4, 0, False), (2, -1, True)):
        check_kthvalue(x, k, dim, keepdim)


def test_kthvalue_views_0_dim_nan_and_bad_input():
    base = torch.randn(9, 40)
    check_kthvalue(base.t()[3:], 5, 0)
    check_kthvalue(base[:, ::3], 7, 1, True)
    check_kthvalue(torch.tensor(2.5), 1, 0)
    with_nan = torch.tensor([[3.0, float("nan"), 1.0], [0.5, 2.0, -1.0]])
    check_kthvalue(with_nan, 3, 1)
    check_kthvalue(with_nan, 2, 1)
    poisoning_failure(call_kthvalue(base, 41, 1)[0], "aoti_torch_mps_kthvalue",
                      "selected number k out of range for dimension 1")
    poisoning_failure(call_kthvalue(base, 0, 1)[0], "k out of range")
    poisoning_failure(call_kthvalue(base, 1, 2)[0], "dim 2 is out of range")
    r = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_kthvalue(ffi.NULL, 1, 0, 0, r, r), "null tensor handle")


def call_median(x, ignore_nan=False):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    shim = lib.aoti_torch_mps_nanmedian if ignore_nan else lib.aoti_torch_mps_median
    return shim(t.handle, r0), r0


def median(x, ignore_nan=False):
    code, r0 = call_median(x, ignore_nan)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_median_matches_torch(dtype):
    for shape in ((101,), (6, 8), (3, 1, 5)):
        x = sample(dtype, shape, 2)
        assert torch.equal(median(x), torch.median(x))
        if dtype.is_floating_point:
            assert torch.equal(median(x, True), torch.nanmedian(x))


def test_median_views_nan_0_dim_and_bad_input():
    x = torch.randn(10, 7).t()[1:]
    assert torch.equal(median(x), torch.median(x))
    assert torch.equal(median(torch.tensor(4.0)), torch.tensor(4.0))
    nan = float("nan")
    for values in ([3.0, nan, 1.0, 2.0, 0.0], [nan, nan], [1.0, 2.0, 3.0, 4.0]):
        t = torch.tensor(values)
        torch.testing.assert_close(median(t), torch.median(t), equal_nan=True, rtol=0, atol=0)
        torch.testing.assert_close(median(t, True), torch.nanmedian(t), equal_nan=True, rtol=0, atol=0)
    poisoning_failure(call_median(torch.empty(0))[0], "aoti_torch_mps_median", "empty tensor")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_nanmedian(ffi.NULL, r0), "null tensor handle")
    t = as_device(x)
    poisoning_failure(lib.aoti_torch_mps_median(t.handle, ffi.NULL), "ret0 is null")
