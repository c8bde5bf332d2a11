"""shim.h's undefined tensors (aoti_torch_new_uninitialized_tensor), pool views
(aoti_torch__alloc_from_pool) and device-generic guards and streams: what each gives, and
clear errors for bad handles, indices and layouts."""

import threading

import numpy as np
import pytest

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails


def test_uninitialized_tensor_is_undefined_until_assigned():
    handle = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_new_uninitialized_tensor(handle))
    defined = ffi.new("bool*")
    etmetal_py.check(lib.aoti_torch_is_defined(handle[0], defined))
    assert not defined[0]
    dim = ffi.new("int64_t*")
    fails(lib.aoti_torch_get_dim(handle[0], dim), "aoti_torch_get_dim", "undefined tensor")
    source = Tensor.from_array(np.arange(6, dtype=np.float32), copy=True)
    etmetal_py.check(lib.aoti_torch_assign_tensors(source.handle, handle[0]))
    etmetal_py.check(lib.aoti_torch_is_defined(handle[0], defined))
    assert defined[0]
    assert np.array_equal(Tensor(handle[0]).numpy(), np.arange(6, dtype=np.float32))
    fails(lib.aoti_torch_new_uninitialized_tensor(ffi.NULL), "ret is null")


def alloc_from_pool(pool, offset_bytes, dtype, sizes, strides):
    out = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch__alloc_from_pool(pool.handle, offset_bytes, dtype, len(sizes),
                                           ffi.new("int64_t[]", sizes), ffi.new("int64_t[]", strides), out)
    return code, out


def test_alloc_from_pool_views_the_pool():
    pool = Tensor.from_array(np.arange(64, dtype=np.uint8), copy=True)
    code, out = alloc_from_pool(pool, 16, lib.aoti_torch_dtype_int32(), [2, 3], [3, 1])
    assert code == 0, etmetal_py.last_error()
    expected = np.arange(64, dtype=np.uint8)[16:40].view(np.int32).reshape(2, 3)
    assert np.array_equal(Tensor(out[0]).numpy(), expected)
    fails(alloc_from_pool(pool, 6, lib.aoti_torch_dtype_int32(), [2], [1])[0], "aoti_torch__alloc_from_pool",
          "not a non-negative multiple of the element size 4")
    fails(alloc_from_pool(pool, 32, lib.aoti_torch_dtype_float32(), [9], [1])[0], "past the end of the pool")
    view = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(pool.handle, 1, ffi.new("int64_t[]", [8]),
                                                        ffi.new("int64_t[]", [1]), 4, view))
    fails(alloc_from_pool(Tensor(view[0]), 0, lib.aoti_torch_dtype_uint8(), [2], [1])[0],
          "must start at its storage's start")


def test_device_guard_and_current_device():
    guard = ffi.new("DeviceGuardHandle*")
    etmetal_py.check(lib.aoti_torch_create_device_guard(0, guard))
    etmetal_py.check(lib.aoti_torch_device_guard_set_index(guard[0], -1))
    fails(lib.aoti_torch_device_guard_set_index(guard[0], 1), "device index 1 does not exist")
    index = ffi.new("int32_t*")
    etmetal_py.check(lib.aoti_torch_get_current_device_index(index))
    assert index[0] == 0
    etmetal_py.check(lib.aoti_torch_delete_device_guard(guard[0]))
    fails(lib.aoti_torch_delete_device_guard(guard[0]), "invalid device guard handle")
    fails(lib.aoti_torch_create_device_guard(3, guard), "aoti_torch_create_device_guard", "device index 3")
    fails(lib.aoti_torch_device_guard_set_index(ffi.NULL, 0), "null device guard handle")


def stream_id():
    stream = ffi.new("StreamHandle*")
    etmetal_py.check(lib.aoti_torch_get_current_stream(0, stream))
    value = ffi.new("int64_t*")
    etmetal_py.check(lib.aoti_torch_stream_id(stream[0], value))
    etmetal_py.check(lib.aoti_torch_delete_stream(stream[0]))
    return value[0]


def test_streams_are_the_calling_threads():
    here = stream_id()
    assert stream_id() == here
    other = []
    thread = threading.Thread(target=lambda: other.append(stream_id()))
    thread.start()
    thread.join()
    assert other[0] != here
    stream = ffi.new("StreamHandle*")
    fails(lib.aoti_torch_get_current_stream(2, stream), "device index 2 does not exist")
    fails(lib.aoti_torch_stream_id(ffi.NULL, ffi.new("int64_t*")), "null stream handle")
    etmetal_py.check(lib.aoti_torch_get_current_stream(-1, stream))
    etmetal_py.check(lib.aoti_torch_delete_stream(stream[0]))
    fails(lib.aoti_torch_delete_stream(stream[0]), "invalid stream handle")
