"""aoti_torch_mps_hann_window, _randperm and _native_dropout: the window against torch eager on
the CPU (every float dtype, lengths 0, 1 and more); randperm and dropout by their contracts
(a permutation in every supported dtype; uniform positions by chi-square; the kept fraction;
kept elements scaled exactly as eager scales them; NaN; eval mode), seed repeatability, and bad
input. The statistics hold at about 4 sigma."""

import math

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

CODES = {torch.float32: 6, torch.float16: 5, torch.bfloat16: 15, torch.int64: 4, torch.int32: 3,
         torch.int16: 2, torch.int8: 1, torch.uint8: 0, torch.bool: 11}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def factory(name, length, dtype=None, layout=ffi.NULL):
    r0 = ffi.new("AtenTensorHandle*")
    code_arg = ffi.NULL if dtype is None else ffi.new("int32_t*", CODES[dtype])
    return getattr(lib, name)(length, code_arg, layout, ffi.NULL, 0, ffi.NULL, r0), r0


def made(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_hann_window_matches_torch(dtype):
    for length in (0, 1, 2, 5, 400, 1024):
        got = made(*factory("aoti_torch_mps_hann_window", length, None if dtype == torch.float32 else dtype))
        expected = torch.hann_window(length, dtype=dtype)
        assert got.dtype == dtype and got.shape == (length,)
        tolerance = 1e-6 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


def test_hann_window_bad_input():
    poisoning_failure(factory("aoti_torch_mps_hann_window", 4, torch.int64)[0], "aoti_torch_mps_hann_window",
                      "expects floating point dtypes")
    poisoning_failure(factory("aoti_torch_mps_hann_window", -1)[0], "non-negative window_length")
    poisoning_failure(factory("aoti_torch_mps_hann_window", 4, layout=ffi.new("int32_t*", 1))[0], "strided only")


def seed(value):
    etmetal_py.check(lib.etmetal_manual_seed(value))


@pytest.mark.parametrize("dtype", [None, torch.int32, torch.int16, torch.int8, torch.uint8] + FLOATS, ids=str)
def test_randperm_is_a_permutation(dtype):
    for n in (0, 1, 7, 128):
        got = made(*factory("aoti_torch_mps_randperm", n, dtype))
        assert got.dtype == (dtype or torch.int64) and got.shape == (n,)
        assert torch.equal(got.long().sort().values, torch.arange(n))


def test_randperm_is_uniform_and_follows_the_seed():
    n, draws = 8, 4000
    seed(5)
    first = made(*factory("aoti_torch_mps_randperm", 1000))
    rows = torch.stack([made(*factory("aoti_torch_mps_randperm", n)) for _ in range(draws)])
    seed(5)
    assert torch.equal(made(*factory("aoti_torch_mps_randperm", 1000)), first)  # the seed repeats the sequence
    assert not torch.equal(made(*factory("aoti_torch_mps_randperm", 1000)), first)  # later calls draw afresh
    # Each value at each position: draws / n expected; chi-square over the n x n table.
    counts = torch.zeros(n, n)
    counts.scatter_add_(1, rows.t(), torch.ones(n, draws))
    expected = draws / n
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    dof = (n - 1) ** 2
    assert chi_square < dof + 6 * math.sqrt(2 * dof)


def test_randperm_bad_input():
    poisoning_failure(factory("aoti_torch_mps_randperm", -1)[0], "aoti_torch_mps_randperm", "negative dimension")
    poisoning_failure(factory("aoti_torch_mps_randperm", 300, torch.int8)[0], "n is too large")
    poisoning_failure(factory("aoti_torch_mps_randperm", 4, torch.bool)[0], "dtype bool is not supported")


def dropout(x, p, train):
    t = as_device(x)
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    train_arg = ffi.NULL if train is None else ffi.new("int32_t*", int(train))
    return lib.aoti_torch_mps_native_dropout(t.handle, p, train_arg, r0, r1), r0, r1


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_native_dropout(dtype):
    x = (torch.randn(40, 500, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    x[0, :10] = float("nan")
    for tensor in (x, x.t(), x[::2, 1::3]):
        for p, train in ((0.3, None), (0.7, True), (0.0, True), (1.0, True), (0.3, False)):
            code, r0, r1 = dropout(tensor, p, train)
            assert code == 0, etmetal_py.last_error()
            out, mask = Tensor(r0[0]).torch(), Tensor(r1[0]).torch()
            assert out.dtype == dtype and mask.dtype == torch.bool and out.shape == mask.shape == tensor.shape
            if train is False:
                assert bool(mask.all())
                torch.testing.assert_close(out, tensor, rtol=0, atol=0, equal_nan=True)
                continue
            n = mask.numel()
            kept = float(mask.float().mean())
            assert abs(kept - (1 - p)) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-9
            # eager's arithmetic on the same mask: input * mask * (1 / (1 - p))
            scale = 0.0 if p == 1 else 1 / (1 - p)
            torch.testing.assert_close(out, tensor * mask * scale, rtol=0, atol=0, equal_nan=True)
    masks = []
    for _ in range(2):
        seed(9)
        _, r0, r1 = dropout(x, 0.5, True)
        Tensor(r0[0])
        masks.append(Tensor(r1[0]).torch())
    assert torch.equal(masks[0], masks[1])


def test_native_dropout_empty_and_bad_input():
    code, r0, r1 = dropout(torch.randn(0, 3), 0.5, True)
    assert code == 0 and Tensor(r0[0]).torch().shape == (0, 3) and Tensor(r1[0]).torch().shape == (0, 3)
    x = torch.randn(4)
    poisoning_failure(dropout(x, 1.5, True)[0], "aoti_torch_mps_native_dropout", "between 0 and 1, but got 1.5")
    poisoning_failure(dropout(x.long(), 0.5, True)[0], "dtype int64 is not supported")
