"""shim.h functions beyond the basics: memory-format codes, scalar_to_tensor_*, as_strided,
zero_, and the proxy-executor entry point (which fails clearly). Checked against torch eager."""

import pytest
import torch

import etmetal_py
from etmetal_testing import fails, new_handle_out
from etmetal_py import Tensor, ffi, lib

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def _source(dtype, shape=(4, 6)):
    values = torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape)
    return (values % 2 == 0) if dtype == torch.bool else values.to(dtype)


def test_memory_format_codes_are_c10s():
    assert lib.aoti_torch_memory_format_contiguous_format() == 0
    assert lib.aoti_torch_memory_format_preserve_format() == 1
    assert lib.aoti_torch_memory_format_channels_last() == 2
    assert lib.aoti_torch_memory_format_channels_last_3d() == 3


SCALARS = [("float32", 1.5, torch.float32), ("float64", -2.25, torch.float64),
           ("uint8", 255, torch.uint8), ("uint16", 65535, torch.uint16),
           ("uint32", 2**32 - 1, torch.uint32), ("uint64", 2**64 - 1, torch.uint64),
           ("int8", -128, torch.int8), ("int16", -32768, torch.int16),
           ("int32", -(2**31), torch.int32), ("int64", -(2**63), torch.int64),
           ("bool", True, torch.bool)]


@pytest.mark.parametrize("name, value, dtype", SCALARS, ids=[s[0] for s in SCALARS])
def test_scalar_to_tensor_is_a_0_dim_cpu_tensor(no_leaks, name, value, dtype):
    out = new_handle_out()
    assert getattr(lib, f"aoti_torch_scalar_to_tensor_{name}")(value, out) == 0
    tensor = Tensor(out[0])
    try:
        device = ffi.new("int32_t*")
        etmetal_py.check(lib.aoti_torch_get_device_type(tensor.handle, device))
        assert device[0] == 0 and tensor.sizes == () and tensor.numel == 1
        expected = torch.scalar_tensor(value, dtype=dtype) if dtype not in (torch.uint16, torch.uint32, torch.uint64) \
            else torch.tensor(value, dtype=dtype)
        got = tensor.torch()
        assert got.shape == () and got.view(-1).view(torch.uint8).tolist() == \
            expected.view(-1).view(torch.uint8).tolist()
    finally:
        tensor.delete()


def test_scalar_to_tensor_bad_input():
    fails(lib.aoti_torch_scalar_to_tensor_float32(1.0, ffi.NULL), "ret_new_tensor is null")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("sizes, strides, offset", [
    ((3, 4), (6, 1), 0),      # rows of a wider matrix
    ((2, 3), (1, 4), 1),      # transposed, from a non-zero storage offset
    ((4, 2), (0, 2), 0),      # a broadcast (stride 0) dimension
    ((0, 5), (5, 1), 0),      # empty
])
def test_as_strided_matches_torch(no_leaks, dtype, sizes, strides, offset):
    source = _source(dtype)
    base = Tensor.from_array(source, copy=True)
    out = new_handle_out()
    view = None
    try:
        if offset:
            shifted = new_handle_out()
            # as_strided takes as many sizes as self has dimensions: keep two.
            row = ffi.new("int64_t[]", [1, 23]), ffi.new("int64_t[]", [23, 1])
            etmetal_py.check(lib.aoti_torch__reinterpret_tensor(base.handle, 2, row[0], row[1], offset, shifted))
            base.delete()
            base = Tensor(shifted[0])
            expected = torch.as_strided(source.view(-1)[offset:], sizes, strides)
        else:
            expected = torch.as_strided(source, sizes, strides)
        etmetal_py.check(lib.aoti_torch_as_strided(base.handle, ffi.new("int64_t[]", list(sizes)),
                                                   ffi.new("int64_t[]", list(strides)), out))
        view = Tensor(out[0])
        assert view.sizes == tuple(sizes) and view.strides == tuple(strides)
        assert view.storage_offset == offset
        assert torch.equal(view.torch(), expected)
    finally:
        if view is not None:
            view.delete()
        base.delete()


def test_as_strided_of_a_0_dim_tensor(no_leaks):
    base = Tensor.from_array(torch.tensor(7, dtype=torch.int64), copy=True)
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_as_strided(base.handle, ffi.NULL, ffi.NULL, out))
    view = Tensor(out[0])
    assert view.sizes == () and view.torch().item() == 7
    view.delete()
    base.delete()


def test_as_strided_bad_input(no_leaks):
    base = Tensor.from_array(torch.zeros(2, 3), copy=True)
    out = new_handle_out()
    try:
        fails(lib.aoti_torch_as_strided(base.handle, ffi.new("int64_t[]", [3, 3]),
                                        ffi.new("int64_t[]", [3, 1]), out), "past the end of its storage")
        fails(lib.aoti_torch_as_strided(base.handle, ffi.new("int64_t[]", [2, 3]),
                                        ffi.new("int64_t[]", [-1, 1]), out), "aoti_torch")
        fails(lib.aoti_torch_as_strided(base.handle, ffi.NULL, ffi.NULL, out), "null")
        fails(lib.aoti_torch_as_strided(ffi.NULL, ffi.NULL, ffi.NULL, out), "aoti_torch_as_strided")
        fails(lib.aoti_torch_as_strided(base.handle, ffi.new("int64_t[]", [2, 3]),
                                        ffi.new("int64_t[]", [3, 1]), ffi.NULL), "ret is null")
    finally:
        base.delete()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided_rows", "empty", "0-dim", "cpu"])
def test_zero_matches_torch(no_leaks, dtype, layout):
    source = _source(dtype, () if layout == "0-dim" else (0, 6) if layout == "empty" else (4, 6))
    device = 0 if layout == "cpu" else 13
    base = Tensor.from_array(source, copy=True, device=device)
    expected = source.clone()
    target = base
    try:
        if layout in ("transposed", "strided_rows"):
            sizes, strides = ((6, 4), (1, 6)) if layout == "transposed" else ((2, 6), (12, 1))
            out = new_handle_out()
            etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
                base.handle, 2, ffi.new("int64_t[]", list(sizes)), ffi.new("int64_t[]", list(strides)), 0, out))
            target = Tensor(out[0])
            torch.as_strided(expected, sizes, strides).zero_()
        else:
            expected.zero_()
        etmetal_py.check(lib.aoti_torch_zero_(target.handle))
        assert torch.equal(base.torch(), expected)
    finally:
        if target is not base:
            target.delete()
        base.delete()


def test_zero_bad_input():
    fails(lib.aoti_torch_zero_(ffi.NULL), "aoti_torch_zero_")
    etmetal_py.synchronize()  # a checked call: its failure is the return code, not a poisoned stream


def test_proxy_executor_call_fails_naming_the_node():
    message = fails(lib.aoti_torch_proxy_executor_call_function(ffi.NULL, 3, 0, ffi.NULL, 0, ffi.NULL),
                    "extern kernel node 3", "proxy executor", "C shim")
    assert message
    with pytest.raises(etmetal_py.EtmetalError, match="extern kernel node 3"):
        etmetal_py.synchronize()  # generated code ignores codes: the stream reports it


def test_call_dispatcher_fails_naming_the_op():
    stack = ffi.new("StableIValue[]", 4)
    message = fails(lib.aoti_torch_call_dispatcher(b"aten::fft_rfft", b"default", stack),
                    "aten::fft_rfft.default", "dispatcher", "C shim")
    assert message
    with pytest.raises(etmetal_py.EtmetalError, match="aten::fft_rfft.default"):
        etmetal_py.synchronize()
    fails(lib.aoti_torch_call_dispatcher(ffi.NULL, ffi.NULL, ffi.NULL), "(null op name)")
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()
