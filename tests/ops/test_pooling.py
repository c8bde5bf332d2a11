"""aoti_torch_mps_max_pool2d_with_indices, _avg_pool2d, _adaptive_avg_pool2d and
adaptive_max_pool2d against torch eager: kernel / stride /
padding / dilation / ceil_mode / count_include_pad / divisor_override combinations, 3-D and
4-D inputs, float32 / float16 / bfloat16, strided (channels-last) inputs, NaN, and bad input.
(Inductor 2.13 lowers max_pool2d_with_indices itself: no compiled model reaches that fallback;
test_compiled_fallbacks.py compiles one that reaches the others.)"""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, launch_shape, no_leaks_in_module, poisoning_failure  # noqa: F401


def call(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    t = as_device(x)
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    lists = [ffi.new("int64_t[]", list(v)) if v else ffi.NULL for v in (kernel_size, stride, padding, dilation)]
    code = lib.aoti_torch_mps_max_pool2d_with_indices(t.handle, lists[0], len(kernel_size), lists[1], len(stride),
                                                     lists[2], len(padding), lists[3], len(dilation),
                                                     int(ceil_mode), r0, r1)
    return code, r0, r1


def max_pool(x, *args, **kwargs):
    code, r0, r1 = call(x, *args, **kwargs)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch(), Tensor(r1[0]).torch()


CASES = [((3,), (), (0,), (1,), False), ((2, 3), (1, 2), (1, 1), (1,), False), ((3,), (2,), (1,), (2,), True),
         ((6, 6), (), (3,), (1,), False), ((3, 2), (2, 3), (0, 1), (2, 1), True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_torch(dtype, case):
    kernel_size, stride, padding, dilation, ceil_mode = CASES[case]
    x = torch.randn(2, 3, 13, 11, generator=torch.Generator().manual_seed(case)).to(dtype)
    for tensor in (x, x[0], x.contiguous(memory_format=torch.channels_last)):
        values, indices = max_pool(tensor, kernel_size, stride, padding, dilation, ceil_mode)
        expected = torch.ops.aten.max_pool2d_with_indices(tensor, list(kernel_size), list(stride), list(padding),
                                                          list(dilation), ceil_mode)
        assert torch.equal(values, expected[0]) and torch.equal(indices, expected[1])


def test_nan_and_bad_input():
    x = torch.randn(1, 1, 6, 6)
    x[0, 0, 1, 4] = x[0, 0, 2, 5] = float("nan")   # two NaN in one window
    values, indices = max_pool(x, (3,))
    expected = torch.ops.aten.max_pool2d_with_indices(x, [3], [], [0], [1], False)
    torch.testing.assert_close(values, expected[0], equal_nan=True, rtol=0, atol=0)
    assert torch.equal(indices, expected[1])
    poisoning_failure(call(x, (3,), padding=(2,))[0], "aoti_torch_mps_max_pool2d_with_indices",
                      "pad should be at most half of effective kernel size")
    poisoning_failure(call(x, (0,))[0], "must be greater than zero")
    poisoning_failure(call(x, (1, 2, 3))[0], "kernel_size must either be a single int, or a tuple of two ints")
    poisoning_failure(call(x, (9,))[0], "Output size is too small")
    poisoning_failure(call(x.long(), (2,))[0], "dtype int64 is not supported")
    poisoning_failure(call(x[0, 0, 0], (2,))[0], "Expected 3D or 4D")
    t = as_device(x)
    poisoning_failure(lib.aoti_torch_mps_max_pool2d_with_indices(t.handle, ffi.NULL, 1, ffi.NULL, 0, ffi.NULL, 0,
                                                                ffi.NULL, 0, 0, ffi.new("AtenTensorHandle*"),
                                                                ffi.new("AtenTensorHandle*")),
                      "kernel_size is null with length 1")


def call_avg(x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor=None):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    lists = [ffi.new("int64_t[]", list(v)) if v else ffi.NULL for v in (kernel_size, stride, padding)]
    divisor_arg = ffi.new("int64_t*", divisor) if divisor is not None else ffi.NULL
    code = lib.aoti_torch_mps_avg_pool2d(t.handle, lists[0], len(kernel_size), lists[1], len(stride), lists[2],
                                        len(padding), int(ceil_mode), int(count_include_pad), divisor_arg, r0)
    return code, r0


AVG_CASES = [((3,), (), (0,), False, True, None), ((3, 2), (2, 1), (1, 1), True, True, None),
             ((3,), (2,), (1,), True, False, None), ((6, 6), (2,), (3,), False, False, None),
             ((2,), (1,), (1,), False, True, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", range(len(AVG_CASES)))
def test_avg_pool2d_matches_torch(dtype, case):
    kernel_size, stride, padding, ceil_mode, count_include_pad, divisor = AVG_CASES[case]
    x = torch.randn(2, 3, 13, 11, generator=torch.Generator().manual_seed(case)).to(dtype)
    for tensor in (x, x[0], x.contiguous(memory_format=torch.channels_last)):
        code, r0 = call_avg(tensor, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)
        assert code == 0, etmetal_py.last_error()
        expected = torch.ops.aten.avg_pool2d(tensor.float(), list(kernel_size), list(stride), list(padding),
                                             ceil_mode, count_include_pad, divisor).to(dtype)
        tolerance = 1e-6 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(Tensor(r0[0]).torch(), expected, rtol=tolerance, atol=tolerance)


def test_avg_pool2d_bad_input():
    x = torch.randn(1, 1, 6, 6)
    poisoning_failure(call_avg(x, (3,), divisor=0)[0], "aoti_torch_mps_avg_pool2d", "divisor must be not zero")
    poisoning_failure(call_avg(x, (3,), padding=(2,))[0], "pad should be at most half of effective kernel size")
    poisoning_failure(call_avg(x.int(), (3,))[0], "dtype int32 is not supported")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_adaptive_pools_match_torch(dtype):
    x = torch.randn(2, 3, 13, 10, generator=torch.Generator().manual_seed(3)).to(dtype)
    x[0, 1, 4, 4] = float("nan")
    for tensor in (x, x[1], x.contiguous(memory_format=torch.channels_last)):
        for size in ((4, 3), (13, 10), (1, 1), (5, 7)):
            sizes = ffi.new("int64_t[]", list(size))
            t = as_device(tensor)
            r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
            etmetal_py.check(lib.aoti_torch_mps__adaptive_avg_pool2d(t.handle, sizes, 2, r0))
            expected = torch.ops.aten._adaptive_avg_pool2d(tensor.float(), list(size)).to(dtype)
            tolerance = 1e-6 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(Tensor(r0[0]).torch(), expected, rtol=tolerance, atol=tolerance,
                                       equal_nan=True)
            etmetal_py.check(lib.aoti_torch_mps_adaptive_max_pool2d(t.handle, sizes, 2, r0, r1))
            values, indices = torch.ops.aten.adaptive_max_pool2d(tensor, list(size))
            torch.testing.assert_close(Tensor(r0[0]).torch(), values, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(Tensor(r1[0]).torch(), indices)


@pytest.mark.parametrize("dtype", [torch.float32] + [pytest.param(d, marks=pytest.mark.slow)
                                                     for d in (torch.float16, torch.bfloat16)], ids=str)
def test_adaptive_pools_of_large_windows_match_torch(dtype, launch_shape):
    # With the GPU launch shape, windows of >= 1024 elements take a threadgroup per output: the
    # maximum's index must still be torch's (the first of equal maxima, the last NaN), whichever
    # thread held it. With the CPU device's shape one thread walks each window.
    x = torch.randn(2, 4, 70, 40, generator=torch.Generator().manual_seed(4)).to(dtype)
    x[0, 0, 10, 5] = x[0, 0, 60, 30] = 100.0  # equal maxima: the first wins
    x[0, 1, 3, 3] = x[0, 1, 50, 7] = float("nan")  # the last NaN wins
    x[0, 2] = float("-inf")  # nothing beats -inf: the window's first position
    x[1, 3, 0, 0] = float("inf")
    for tensor in (x, x[1], x.contiguous(memory_format=torch.channels_last), x[:, :, 5:, ::2]):
        for size in ((1, 1), (2, 1), (1, 3)):
            sizes = ffi.new("int64_t[]", list(size))
            t = as_device(tensor)
            r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
            etmetal_py.check(lib.aoti_torch_mps__adaptive_avg_pool2d(t.handle, sizes, 2, r0))
            expected = torch.ops.aten._adaptive_avg_pool2d(tensor.double(), list(size))
            tolerance = 1e-5 if dtype == torch.float32 else 1e-2
            torch.testing.assert_close(Tensor(r0[0]).torch().double(), expected, rtol=tolerance, atol=tolerance,
                                       equal_nan=True)
            etmetal_py.check(lib.aoti_torch_mps_adaptive_max_pool2d(t.handle, sizes, 2, r0, r1))
            values, indices = torch.ops.aten.adaptive_max_pool2d(tensor, list(size))
            torch.testing.assert_close(Tensor(r0[0]).torch(), values, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(Tensor(r1[0]).torch(), indices)


def test_adaptive_pools_bad_input():
    t = as_device(torch.randn(1, 2, 5, 5))
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps__adaptive_avg_pool2d(t.handle, ffi.new("int64_t[]", [3]), 1, r0),
                      "aoti_torch_mps__adaptive_avg_pool2d", "output_size must be 2")
    poisoning_failure(lib.aoti_torch_mps_adaptive_max_pool2d(t.handle, ffi.new("int64_t[]", [0, 2]), 2, r0, r1),
                      "output_size [0, 2] is not valid")
    poisoning_failure(lib.aoti_torch_mps__adaptive_avg_pool2d(t.handle, ffi.NULL, 2, r0), "output_size is null")
