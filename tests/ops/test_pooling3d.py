"""aoti_torch_mps_max_pool3d_with_indices, _avg_pool3d, _max_unpool2d and _max_unpool3d against
torch eager on the CPU: kernel / stride / padding / dilation / ceil_mode / count_include_pad /
divisor_override combinations, batched and unbatched inputs, strided (channels-last, sliced)
inputs, floating and integer dtypes, NaN, empty batches, and bad input (including an index out
of range, which only the kernel sees). test_compiled_fallbacks.py compiles a model that reaches
avg_pool3d and max_unpool2d through their C shims."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def int_lists(*values):
    return [ffi.new("int64_t[]", list(v)) if v else ffi.NULL for v in values]


def call_max(x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    t = as_device(x)
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    k, s, p, d = int_lists(kernel_size, stride, padding, dilation)
    code = lib.aoti_torch_mps_max_pool3d_with_indices(t.handle, k, len(kernel_size), s, len(stride), p, len(padding),
                                                     d, len(dilation), int(ceil_mode), r0, r1)
    return code, r0, r1


def call_avg(x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor=None):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    k, s, p = int_lists(kernel_size, stride, padding)
    divisor_arg = ffi.new("int64_t*", divisor) if divisor is not None else ffi.NULL
    code = lib.aoti_torch_mps_avg_pool3d(t.handle, k, len(kernel_size), s, len(stride), p, len(padding),
                                        int(ceil_mode), int(count_include_pad), divisor_arg, r0)
    return code, r0


def views(x):
    """x, its first batch entry (unbatched), channels-last, and a strided slice."""
    return (x, x[0], x.contiguous(memory_format=torch.channels_last_3d), x[:, :, 1:, ::2, :])


MAX_CASES = [((2,), (), (0,), (1,), False), ((3, 2, 2), (1, 2, 1), (1, 1, 0), (1,), False),
             ((3,), (2,), (1,), (2,), True), ((2, 3, 2), (2, 1, 3), (0, 1, 1), (2, 1, 1), True)]


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.uint8], ids=str)
def test_max_pool3d_matches_torch(dtype):
    x = torch.randn(2, 3, 7, 9, 8, generator=torch.Generator().manual_seed(1)) * 20
    x = x.to(dtype) if dtype.is_floating_point else x.abs().to(dtype)
    for kernel_size, stride, padding, dilation, ceil_mode in MAX_CASES:
        for tensor in views(x):
            code, r0, r1 = call_max(tensor, kernel_size, stride, padding, dilation, ceil_mode)
            assert code == 0, etmetal_py.last_error()
            # (contiguous: torch's channels-last CPU kernel for uint8 rejects these sizes)
            values, indices = torch.ops.aten.max_pool3d_with_indices(tensor.contiguous(), list(kernel_size),
                                                                     list(stride), list(padding), list(dilation),
                                                                     ceil_mode)
            assert torch.equal(Tensor(r0[0]).torch(), values) and torch.equal(Tensor(r1[0]).torch(), indices)


@pytest.mark.parametrize("dtype", INTEGERS[1:4], ids=str)
def test_max_pool3d_integer_dtypes(dtype):
    x = torch.randint(-100, 100, (1, 2, 5, 6, 7), generator=torch.Generator().manual_seed(2)).to(dtype)
    x[0, 0, :2, :2, :2] = torch.iinfo(dtype).min   # a window of the smallest value keeps its first index
    code, r0, r1 = call_max(x, (2,), (2,), (0,), (1,), True)
    assert code == 0, etmetal_py.last_error()
    values, indices = torch.ops.aten.max_pool3d_with_indices(x, [2], [2], [0], [1], True)
    assert torch.equal(Tensor(r0[0]).torch(), values) and torch.equal(Tensor(r1[0]).torch(), indices)


def test_max_pool3d_nan_empty_and_bad_input():
    x = torch.randn(1, 1, 4, 4, 4)
    x[0, 0, 0, 1, 1] = x[0, 0, 1, 0, 1] = float("nan")   # two NaN in one window: the last one's index
    code, r0, r1 = call_max(x, (2,))
    assert code == 0, etmetal_py.last_error()
    values, indices = torch.ops.aten.max_pool3d_with_indices(x, [2], [], [0], [1], False)
    torch.testing.assert_close(Tensor(r0[0]).torch(), values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(Tensor(r1[0]).torch(), indices)
    code, r0, r1 = call_max(torch.randn(0, 2, 4, 4, 4), (2,))
    assert code == 0 and Tensor(r0[0]).torch().shape == (0, 2, 2, 2, 2) and Tensor(r1[0]).torch().numel() == 0
    poisoning_failure(call_max(x, (3,), padding=(2,))[0], "aoti_torch_mps_max_pool3d_with_indices",
                      "pad should be at most half of effective kernel size")
    poisoning_failure(call_max(x, (0,))[0], "must be greater than zero")
    poisoning_failure(call_max(x, (1, 2))[0], "kernel_size must either be a single int, or a tuple of three ints")
    poisoning_failure(call_max(x, (5,))[0], "Output size is too small")
    poisoning_failure(call_max(x.bool(), (2,))[0], "dtype bool is not supported")
    poisoning_failure(call_max(x[0, 0], (2,))[0], "Expected 4D or 5D")
    poisoning_failure(call_max(torch.randn(1, 1, 0, 4, 4), (2,))[0], "non-batch dimensions to have positive length")


AVG_CASES = [((2,), (), (0,), False, True, None), ((3, 2, 3), (2, 1, 2), (1, 1, 1), True, True, None),
             ((3,), (2,), (1,), True, False, None), ((2,), (1,), (1,), False, True, 3)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_avg_pool3d_matches_torch(dtype):
    x = torch.randn(2, 3, 7, 9, 8, generator=torch.Generator().manual_seed(3)).to(dtype)
    tolerance = 1e-6 if dtype == torch.float32 else 1e-2
    for kernel_size, stride, padding, ceil_mode, count_include_pad, divisor in AVG_CASES:
        for tensor in views(x):
            code, r0 = call_avg(tensor, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor)
            assert code == 0, etmetal_py.last_error()
            # torch's CPU avg_pool3d has no half kernels: the reference pools in float32.
            expected = torch.ops.aten.avg_pool3d(tensor.float(), list(kernel_size), list(stride), list(padding),
                                                 ceil_mode, count_include_pad, divisor).to(dtype)
            torch.testing.assert_close(Tensor(r0[0]).torch(), expected, rtol=tolerance, atol=tolerance)


def test_avg_pool3d_bad_input():
    x = torch.randn(1, 1, 4, 4, 4)
    poisoning_failure(call_avg(x, (2,), divisor=0)[0], "aoti_torch_mps_avg_pool3d", "divisor must be not zero")
    poisoning_failure(call_avg(x, (3,), padding=(2,))[0], "pad should be at most half of effective kernel size")
    poisoning_failure(call_avg(x.long(), (2,))[0], "dtype int64 is not supported")
    poisoning_failure(call_avg(x, (2,), stride=(1, 1))[0], "stride must either be a single int, or a tuple of three")


def call_unpool(x, indices, output_size, stride=None, padding=None):
    t, i = as_device(x), as_device(indices)
    r0 = ffi.new("AtenTensorHandle*")
    (o,) = int_lists(output_size)
    if stride is None:
        return lib.aoti_torch_mps_max_unpool2d(t.handle, i.handle, o, len(output_size), r0), r0
    s, p = int_lists(stride, padding)
    return lib.aoti_torch_mps_max_unpool3d(t.handle, i.handle, o, len(output_size), s, len(stride), p, len(padding),
                                          r0), r0


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int8], ids=str)
def test_max_unpool_matches_torch(dtype):
    x = torch.randn(2, 3, 8, 10, 6, generator=torch.Generator().manual_seed(4))
    values3, indices3 = torch.ops.aten.max_pool3d_with_indices(x, [2], [2], [0], [1], False)
    values2, indices2 = torch.ops.aten.max_pool2d_with_indices(x[:, :, 0], [2], [2], [0], [1], False)
    cases = [(values2, indices2, [8, 10], None, None), (values2, indices2, [9, 11], None, None),
             (values3, indices3, [8, 10, 6], [2, 2, 2], [0, 0, 0]),
             (values3.transpose(1, 2).contiguous().transpose(1, 2), indices3[:, :, ::1], [8, 10, 6], [2, 2, 2],
              [0, 0, 0])]
    for values, indices, size, stride, padding in cases:
        # torch's CPU unpooling has floating kernels only; the values survive the round trip.
        scaled = (values * 30).to(dtype)
        unpool = torch.ops.aten.max_unpool2d if stride is None else torch.ops.aten.max_unpool3d
        extra = [] if stride is None else [stride, padding]
        expected = unpool(scaled.double(), indices, size, *extra).to(dtype)
        for v, i in ((scaled, indices), (scaled[0], indices[0])):
            code, r0 = call_unpool(v, i, size, stride, padding)
            assert code == 0, etmetal_py.last_error()
            assert torch.equal(Tensor(r0[0]).torch(), expected if v.dim() == scaled.dim() else expected[0])


def test_max_unpool_bad_input():
    x = torch.randn(1, 2, 3, 3)
    indices = torch.arange(9).repeat(1, 2, 1).reshape(1, 2, 3, 3)
    code, r0 = call_unpool(x, torch.full_like(indices, 40), [6, 6])
    assert code == 0  # the kernel finds the bad index; the next synchronize reports it
    Tensor(r0[0])
    with pytest.raises(etmetal_py.EtmetalError, match="Found an invalid max index: 40 \\(output volumes are of size 6x6"):
        etmetal_py.synchronize()
    poisoning_failure(call_unpool(x, indices, [6])[0], "aoti_torch_mps_max_unpool2d",
                      "There should be exactly 2 elements in output_size")
    poisoning_failure(call_unpool(x, indices.int(), [6, 6])[0], "elements in indices should be type int64")
    poisoning_failure(call_unpool(x, indices[:, :, :2], [6, 6])[0], "Expected shape of indices to be same")
    poisoning_failure(call_unpool(x.bool(), indices, [6, 6])[0], "dtype bool is not supported")
    x3, indices3 = x.unsqueeze(2), indices.unsqueeze(2)
    poisoning_failure(call_unpool(x3, indices3, [1, 6, 6], [1, 0, 1], [0, 0, 0])[0], "aoti_torch_mps_max_unpool3d",
                      "strides should be greater than zero")
    poisoning_failure(call_unpool(x3, indices3, [1, 6, 6], [1, 1], [0, 0, 0])[0],
                      "three elements (depth, height, width) in stride")
