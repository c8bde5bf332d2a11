"""Kernel dispatch through the C ABI: geometry, argument binding, ordering, bad input."""

import numpy as np
import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.kernels import compile_library
from etmetal_testing import fails, new_handle_out

SOURCE = """
#include <metal_stdlib>
using namespace metal;

kernel void fill_index(device float* out, uint i [[thread_position_in_grid]]) {
  out[i] = float(i);
}

kernel void add_scaled(device float* out, constant float* a, constant float* b,
                       constant float& scale, uint i [[thread_position_in_grid]]) {
  out[i] = a[i] + scale * b[i];
}

kernel void record_group(device uint* out, uint i [[thread_position_in_grid]],
                         uint group_size [[threads_per_threadgroup]]) {
  out[i] = group_size;
}

[[max_total_threads_per_threadgroup(64)]]
kernel void small_groups(device float* out, uint i [[thread_position_in_grid]]) {
  out[i] = 1.0f;
}
"""


@pytest.fixture(scope="module")
def library():
    with compile_library(SOURCE) as compiled:
        yield compiled


def encode(function, *tensors):
    etmetal_py.check(lib.aoti_torch_mps_start_encoding(function.handle))
    for index, tensor in enumerate(tensors):
        etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function.handle, index, tensor.handle))


def test_python_kernels_api_in_place_and_copied(library):
    add = library.function("add_scaled")
    a = np.arange(300, dtype=np.float32)
    b = np.full(300, 2.0, np.float32)
    out = np.zeros(300, np.float32)
    add(out, a, b, 0.5, threads=300)
    np.testing.assert_array_equal(out, a + 1.0)
    # Torch tensors, a non-contiguous output (copied in, computed, copied back).
    out_t = torch.zeros(600)[::2]
    add(out_t, torch.from_numpy(a), torch.from_numpy(b), np.float32(3), threadgroups=(10,), group=(30,))
    np.testing.assert_array_equal(out_t.numpy(), a + 6.0)


def test_default_group_sizes_follow_torch(library):
    record = library.function("record_group")
    out = Tensor.empty([2000], np.uint32)
    encode(record, out)
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(record.handle, 2000))
    # min(length, max threads) = 1024; the last group is partial.
    got = out.numpy()
    assert got[0] == 1024
    out = Tensor.empty([100], np.uint32)
    encode(record, out)
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(record.handle, 100))
    assert (out.numpy() == 100).all()
    encode(record, out)
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(record.handle, 100, 32))
    assert out.numpy()[0] == 32


def test_reads_through_offset_views_see_earlier_writes(library):
    """ExecuTorch's defect: a view with a storage offset must observe pending writes."""
    fill, add = library.function("fill_index"), library.function("add_scaled")
    base = Tensor.empty([64])
    encode(fill, base)
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(fill.handle, 64))
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
        base.handle, 1, ffi.new("int64_t[]", [32]), ffi.new("int64_t[]", [1]), 16, out))
    view = Tensor(out[0])
    zeros = Tensor.from_array(np.zeros(32, np.float32), copy=True)
    result = Tensor.empty([32])
    scale = Tensor.from_array(np.ones((), np.float32), device=etmetal_py.CPU, copy=True)
    encode(add, result, view, zeros, scale)  # no synchronize between the two dispatches
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(add.handle, 32))
    np.testing.assert_array_equal(result.numpy(), np.arange(16, 48, dtype=np.float32))


def test_dispatch_rejects_bad_geometry_and_arguments(library):
    fill, small = library.function("fill_index"), library.function("small_groups")
    out = Tensor.empty([4096])
    etmetal_py.synchronize()
    encode(fill, out)
    fails(lib.aoti_torch_mps_dispatch_single_with_group_size(fill.handle, 4096, 2048),
          "exceeds", "1024")
    encode(small, out)
    fails(lib.aoti_torch_mps_dispatch_single_with_group_size(small.handle, 256, 128),
          "maximum of 64")
    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(small.handle, 256))  # default group fits
    encode(fill, out)
    lengths = ffi.new("uint64_t[]", [4, 4, 4, 4])
    fails(lib.aoti_torch_mps_dispatch_array(fill.handle, lengths, 4), "1 to 3 dimensions")
    fails(lib.aoti_torch_mps_dispatch_array(fill.handle, lengths, 0), "1 to 3 dimensions")
    fails(lib.aoti_torch_mps_dispatch_array_with_group_size(
        fill.handle, lengths, 2, ffi.new("uint64_t[]", [4]), 1), "group_size has 1")
    fails(lib.aoti_torch_mps_dispatch_array_with_group_size(
        fill.handle, lengths, 2, ffi.new("uint64_t[]", [64, 32]), 2), "exceeds")
    fails(lib.aoti_torch_mps_set_arg_tensor(fill.handle, 31, out.handle), "out of range")
    fails(lib.aoti_torch_mps_set_arg_int(fill.handle, 1000, 3), "out of range")
    fails(lib.aoti_torch_mps_set_arg_tensor(fill.handle, 0, ffi.NULL), "null tensor handle")
    # Arguments must all be set: index 1 bound, index 0 not.
    etmetal_py.check(lib.aoti_torch_mps_start_encoding(fill.handle))
    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(fill.handle, 1, out.handle))
    fails(lib.aoti_torch_mps_dispatch_single(fill.handle, 8), "argument 0", "not set")
    # Binding for a kernel that is not the one being encoded.
    fails(lib.aoti_torch_mps_set_arg_tensor(small.handle, 0, out.handle), "not being encoded")
    # Each failure above also poisoned the stream: the next wait reports the first.
    fails(lib.etmetal_synchronize(2), "exceeds")
    etmetal_py.synchronize()


def test_kernel_handles_die_with_their_library():
    library = compile_library(SOURCE)
    fill = library.function("fill_index")
    again = library.function("fill_index")
    assert fill.handle == again.handle
    fails(lib.aoti_torch_mps_get_kernel_function(library.handle, b"no_such_kernel",
                                                 ffi.new("AOTIMetalKernelFunctionHandle*")),
          "no_such_kernel")
    fails(lib.etmetal_synchronize(2), "no_such_kernel")  # it poisoned the stream too
    library.close()
    fails(lib.aoti_torch_mps_start_encoding(fill.handle), "invalid kernel function handle")
    fails(lib.aoti_torch_mps_delete_shader_library(ffi.cast("AOTIMetalShaderLibraryHandle", fill.handle)),
          "invalid shader library handle")
    lib.etmetal_synchronize(2)


def test_compile_errors_name_the_msl_line():
    source = "#include <metal_stdlib>\nusing namespace metal;\n\nkernel void k(device float* o) {\n  o[0] = undefined_name;\n}\n"
    handle = ffi.new("AOTIMetalShaderLibraryHandle*")
    message = fails(lib.aoti_torch_mps_create_shader_library(source.encode(), handle),
                    "undefined_name")
    assert ":5" in message  # the MSL line of the error
    # Inside a model run nobody checks this call's result: the stream reports it too.
    fails(lib.etmetal_synchronize(2), "undefined_name")
    fails(lib.aoti_torch_mps_create_shader_library(ffi.NULL, handle), "is null")
    lib.etmetal_synchronize(2)


def test_run_command_block_calls_back_on_this_thread(library):
    fill = library.function("fill_index")
    out = Tensor.empty([16])
    calls = []

    @ffi.callback("void(AOTIMetalKernelFunctionHandle, void*)")
    def block(function, user_data):
        calls.append(ffi.cast("uintptr_t", user_data))
        lib.aoti_torch_mps_start_encoding(function)
        lib.aoti_torch_mps_set_arg_tensor(function, 0, out.handle)
        lib.aoti_torch_mps_dispatch_single(function, 16)

    etmetal_py.check(lib.aoti_torch_mps_run_command_block(fill.handle, block, ffi.cast("void*", 7)))
    assert calls == [7]
    np.testing.assert_array_equal(out.numpy(), np.arange(16, dtype=np.float32))
    fails(lib.aoti_torch_mps_run_command_block(fill.handle, ffi.NULL, ffi.NULL), "callback is null")
    lib.etmetal_synchronize(2)
