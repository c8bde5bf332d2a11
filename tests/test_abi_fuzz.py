"""Hostile input across the C ABI: null, freed, wrong-kind and garbage handles, negative and
huge sizes, bad dtypes, byte ranges past an allocation's end, sizes that overflow. Every call
must fail with a message (never crash, never succeed), and a freed handle must never reach
another object, even when its memory has been reused."""

import itertools
import threading

import numpy as np
import pytest

import etmetal_py
from etmetal_testing import empty, fails, new_handle_out
from etmetal_py import ffi, lib

ADD_SOURCE = """
#include <metal_stdlib>
using namespace metal;
kernel void copy_one(device float* out [[buffer(0)]], const device float* in [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) { out[i] = in[i]; }
"""


def int64s(values):
    return ffi.new("int64_t[]", list(values))


def malloc(nbytes):
    out = ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(out, nbytes))
    return out[0]


@pytest.fixture(scope="module")
def kernel():
    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(ADD_SOURCE.encode(), library))
    function = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"copy_one", function))
    yield library[0], function[0]
    lib.aoti_torch_mps_delete_shader_library(library[0])


def garbage_tensor_handles():
    freed = empty([2])
    etmetal_py.check(lib.aoti_torch_delete_tensor_object(freed))
    return {
        "null": ffi.NULL,
        "freed": freed,
        "garbage": ffi.cast("AtenTensorHandle", 0x1234),
        "host memory": ffi.cast("AtenTensorHandle", ffi.new("char[64]")),
        "all ones": ffi.cast("AtenTensorHandle", (1 << 64) - 1),
    }


def test_every_tensor_function_rejects_bad_handles():
    getters = [("aoti_torch_get_numel", "int64_t*"), ("aoti_torch_get_dim", "int64_t*"),
               ("aoti_torch_get_dtype", "int32_t*"), ("aoti_torch_get_data_ptr", "void**"),
               ("aoti_torch_get_sizes", "int64_t**"), ("aoti_torch_get_strides", "int64_t**"),
               ("aoti_torch_get_storage_offset", "int64_t*"),
               ("aoti_torch_get_storage_size", "int64_t*"),
               ("aoti_torch_get_device_type", "int32_t*"), ("aoti_torch_is_contiguous", "bool*"),
               ("aoti_torch_clone", "AtenTensorHandle*"),
               ("aoti_torch_new_tensor_handle", "AtenTensorHandle*"),
               ("aoti_torch_item_float32", "float*")]
    handles = garbage_tensor_handles()
    for (name, ctype), (kind, handle) in itertools.product(getters, handles.items()):
        expected = "null tensor handle" if kind == "null" else "invalid tensor handle"
        fails(getattr(lib, name)(handle, ffi.new(ctype)), expected, name)
    for kind, handle in handles.items():
        fails(lib.aoti_torch_delete_tensor_object(handle), "tensor handle")
        fails(lib.aoti_torch_copy_(handle, handle, 0), "tensor handle")


def test_freed_handles_never_reach_a_later_tensor():
    """Handles are never reused: a stale handle stays invalid though new tensors take its
    memory, and a double delete cannot free a live tensor."""
    stale = []
    for _ in range(64):
        h = empty([3])
        etmetal_py.check(lib.aoti_torch_delete_tensor_object(h))
        stale.append(h)
    live = [empty([5]) for _ in range(64)]
    try:
        live_values = {int(ffi.cast("uintptr_t", h)) for h in live}
        assert not live_values & {int(ffi.cast("uintptr_t", h)) for h in stale}
        for h in stale:
            fails(lib.aoti_torch_get_numel(h, ffi.new("int64_t*")), "invalid tensor handle")
            fails(lib.aoti_torch_delete_tensor_object(h), "invalid tensor handle")
        for h in live:
            numel = ffi.new("int64_t*")
            etmetal_py.check(lib.aoti_torch_get_numel(h, numel))
            assert numel[0] == 5
    finally:
        for h in live:
            lib.aoti_torch_delete_tensor_object(h)


def test_library_and_kernel_handles_are_never_reused(kernel):
    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(ADD_SOURCE.encode(), library))
    function = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"copy_one", function))
    again = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"copy_one", again))
    assert again[0] == function[0]  # one handle per kernel
    etmetal_py.check(lib.aoti_torch_mps_delete_shader_library(library[0]))
    fails(lib.aoti_torch_mps_delete_shader_library(library[0]), "invalid shader library handle")
    fails(lib.aoti_torch_mps_start_encoding(function[0]), "invalid kernel function handle")
    assert lib.etmetal_synchronize(2) == 1
    # Wrong kinds: a tensor handle is no kernel, a kernel handle no library or tensor.
    _library, live_kernel = kernel
    t = empty([2])
    try:
        fails(lib.aoti_torch_mps_start_encoding(ffi.cast("AOTIMetalKernelFunctionHandle", t)),
              "invalid kernel function handle")
        fails(lib.aoti_torch_get_numel(ffi.cast("AtenTensorHandle", live_kernel),
                                       ffi.new("int64_t*")), "invalid tensor handle")
        fails(lib.aoti_torch_mps_delete_shader_library(
            ffi.cast("AOTIMetalShaderLibraryHandle", live_kernel)), "invalid shader library handle")
    finally:
        lib.aoti_torch_delete_tensor_object(t)
    assert lib.etmetal_synchronize(2) == 1


def test_a_handle_looked_up_before_its_deletion_is_invalid_after_it():
    """Handle lookups are cached per thread: a delete, here or on another thread, must still
    invalidate a handle this thread has just used."""
    def on_other_thread(call):
        worker = threading.Thread(target=call)
        worker.start()
        worker.join()

    for delete in (lambda call: call(), on_other_thread):
        h = empty([3])
        numel = ffi.new("int64_t*")
        etmetal_py.check(lib.aoti_torch_get_numel(h, numel))
        assert numel[0] == 3
        delete(lambda: etmetal_py.check(lib.aoti_torch_delete_tensor_object(h)))
        fails(lib.aoti_torch_get_numel(h, numel), "invalid tensor handle")

        library = ffi.new("AOTIMetalShaderLibraryHandle*")
        etmetal_py.check(lib.aoti_torch_mps_create_shader_library(ADD_SOURCE.encode(), library))
        function = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"copy_one", function))
        etmetal_py.check(lib.aoti_torch_mps_start_encoding(function[0]))
        delete(lambda: etmetal_py.check(lib.aoti_torch_mps_delete_shader_library(library[0])))
        fails(lib.aoti_torch_mps_start_encoding(function[0]), "invalid kernel function handle")
        assert lib.etmetal_synchronize(2) == 1


@pytest.mark.parametrize("ndim,sizes,strides,offset,dtype,device,fragment", [
    (1, [4], None, -1, 6, 13, "negative storage offset"),
    (-1, [4], None, 0, 6, 13, "number of dimensions"),
    (65, [1] * 65, None, 0, 6, 13, "number of dimensions"),
    (2, [1 << 32, 1 << 32], [0, 0], 0, 6, 13, "overflow"),
    (2, [1 << 62, 4], None, 0, 6, 13, "overflow"),
    (1, [1 << 61], None, 0, 7, 13, "overflow"),
    (1, [4], [-1], 0, 6, 13, "negative stride"),
    (1, [4], None, 1 << 62, 6, 13, "overflow"),
    (1, [4], None, 0, 9999, 13, "unsupported dtype"),
    (1, [4], None, 0, 6, 99, "unsupported device type"),
])
def test_from_blob_rejects_invalid_layouts(ndim, sizes, strides, offset, dtype, device, fragment):
    blob = malloc(64)
    try:
        for function in ("aoti_torch_create_tensor_from_blob", "aoti_torch_create_tensor_from_blob_v2"):
            out = new_handle_out()
            args = [blob, ndim, int64s(sizes), ffi.NULL if strides is None else int64s(strides),
                    offset, dtype, device, 0, out]
            if function.endswith("v2"):
                args += [0, ffi.NULL, 0]
            fails(getattr(lib, function)(*args), fragment, function)
    finally:
        lib.aoti_torch_mps_free(blob)


def test_from_blob_v2_rejects_bad_metadata_and_ranges():
    blob = malloc(64)
    out = new_handle_out()
    try:
        fails(lib.aoti_torch_create_tensor_from_blob_v2(blob, 1, int64s([4]), ffi.NULL, 0, 6, 13, 0,
                                                        out, 0, ffi.NULL, -3), "metadata")
        # 64 bytes asked for: 17 floats do not fit, though the page behind them would.
        fails(lib.aoti_torch_create_tensor_from_blob(blob, 1, int64s([17]), ffi.NULL, 0, 6, 13, 0,
                                                     out), "past the end")
        fails(lib.aoti_torch_create_tensor_from_blob(blob, 1, int64s([4]), ffi.NULL, 13, 6, 13, 0,
                                                     out), "past the end")
        etmetal_py.check(lib.aoti_torch_create_tensor_from_blob(blob, 1, int64s([4]), ffi.NULL, 12,
                                                                6, 13, 0, out))
        lib.aoti_torch_delete_tensor_object(out[0])
    finally:
        lib.aoti_torch_mps_free(blob)


def test_byte_ranges_are_checked_against_what_was_allocated():
    src, dst = malloc(100), malloc(100)
    host = np.zeros(1 << 15, dtype=np.uint8)
    try:
        ok = lib.aoti_torch_mps_copy_buffer(src, dst, 100, 0, 0)
        assert ok == 0
        for size, src_off, dst_off in [(101, 0, 0), (100 + 257, 0, 0), (1, 100, 0), (1, 0, 100),
                                       (2, 99, 0), (1, (1 << 64) - 1, 0), ((1 << 64) - 1, 1, 1)]:
            fails(lib.aoti_torch_mps_copy_buffer(src, dst, size, src_off, dst_off), "past the end")
        assert lib.etmetal_synchronize(2) == 1  # encoding failures also poison the stream
        constants = ffi.from_buffer(host)
        etmetal_py.check(lib.aoti_torch_mps_memcpy(dst, 0, 0, 100, constants))
        for offset, size in [(0, 101), (100, 1), (99, 2), (1 << 63, 1), (1, (1 << 64) - 1)]:
            fails(lib.aoti_torch_mps_memcpy(dst, offset, 0, size, constants), "past the end")
        fails(lib.aoti_torch_mps_memcpy(dst, 0, (1 << 64) - 8, 16, constants), "wraps")
        assert lib.metal_copy_memory(constants, src, 100, True, False) == 0
        assert lib.metal_copy_memory(constants, src, 357, True, False) == -1
        assert "past the end" in etmetal_py.last_error()
        assert lib.metal_copy_memory(ffi.cast("char*", src) + 50, constants, 51, False, True) == -1
        assert "past the end" in etmetal_py.last_error()
    finally:
        lib.aoti_torch_mps_free(src)
        lib.aoti_torch_mps_free(dst)


def test_buffer_nocopy_rejects_invalid_ranges():
    blob = malloc(100)
    try:
        assert lib.metal_buffer_nocopy(blob, 100, True)  # already device memory
        assert not lib.metal_buffer_nocopy(blob, 101, True)
        assert "past the end" in etmetal_py.last_error()
        assert not lib.metal_buffer_nocopy(blob, (1 << 64) - 1, True)
        assert "wraps" in etmetal_py.last_error()
        assert not lib.metal_buffer_nocopy(ffi.cast("char*", blob) - 64, 128, True)
        assert "overlaps" in etmetal_py.last_error()
        assert not lib.metal_buffer_nocopy(ffi.NULL, 16, True)
        assert not lib.metal_buffer_nocopy(blob, 0, True)
        host = np.zeros(64, dtype=np.uint8)
        lib.metal_buffer_nocopy(ffi.from_buffer(host), (1 << 64) - 1, True)
        assert not lib.metal_is_device_pointer(ffi.cast("void*", 0x10))
        assert not lib.metal_is_device_pointer(ffi.cast("void*", (1 << 64) - 16))
    finally:
        lib.aoti_torch_mps_free(blob)


def test_dispatch_sizes_never_wrap(kernel):
    _library, function = kernel
    out, inp = empty([4]), empty([4])
    try:
        def encode():
            etmetal_py.check(lib.aoti_torch_mps_start_encoding(function))
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function, 0, out))
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function, 1, inp))

        encode()
        big = ffi.new("uint64_t[]", [1 << 22] * 3)
        fails(lib.aoti_torch_mps_dispatch_array(function, big, 3), "too large")
        fails(lib.aoti_torch_mps_dispatch_array(function, ffi.new("uint64_t[]", [1 << 32]), 1),
              "too large")
        group = ffi.new("uint64_t[]", [1 << 31, 1 << 31, 4])
        fails(lib.aoti_torch_mps_dispatch_array_with_group_size(
            function, ffi.new("uint64_t[]", [4, 4, 4]), 3, group, 3), "exceeds")
        fails(lib.aoti_torch_mps_dispatch_single_with_group_size(function, 4, 0), "positive")
        fails(lib.aoti_torch_mps_set_arg_tensor(function, 1 << 31, inp), "out of range")
        fails(lib.aoti_torch_mps_dispatch_array(function, ffi.new("uint64_t[]", [1]), 4),
              "1 to 3 dimensions")
        assert lib.etmetal_synchronize(2) == 1
    finally:
        lib.aoti_torch_delete_tensor_object(out)
        lib.aoti_torch_delete_tensor_object(inp)


def test_oversized_attribute_indices_are_rejected():
    source = """
    kernel void k(device float* out [[buffer(4294967296)]], uint i [[thread_position_in_grid]]) {
      out[i] = 1.0f;
    }"""
    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    code = lib.aoti_torch_mps_create_shader_library(source.encode(), library)
    if code == 0:
        function = ffi.new("AOTIMetalKernelFunctionHandle*")
        code = lib.aoti_torch_mps_get_kernel_function(library[0], b"k", function)
        lib.aoti_torch_mps_delete_shader_library(library[0])
    fails(code, "out of range")
    lib.etmetal_synchronize(2)
