"""Helpers to compile MSL with the CPU device and run kernels through the public C ABI
(aoti_torch_mps_create_shader_library / get_kernel_function / start_encoding / set_arg_* /
dispatch_* and etmetal_synchronize)."""

import numpy as np
import pytest

import etmetal_py
from etmetal_py import ffi, lib
from etmetal_py.tensors import Tensor


def require_cpu_device():
    kind = ffi.string(lib.etmetal_device_kind()).decode()
    if kind != "cpu":
        pytest.skip(f"the active device is {kind!r}; these tests exercise the CPU device")


class ShaderLibrary:
    def __init__(self, source):
        handle = ffi.new("AOTIMetalShaderLibraryHandle*")
        etmetal_py.check(lib.aoti_torch_mps_create_shader_library(source.encode(), handle),
                         "create_shader_library")
        self.handle = handle[0]

    def kernel(self, name):
        out = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(self.handle, name.encode(), out),
                         "get_kernel_function")
        return Kernel(self, out[0])

    def close(self):
        if self.handle is not None:
            etmetal_py.synchronize()
            etmetal_py.check(lib.aoti_torch_mps_delete_shader_library(self.handle))
            self.handle = None


class Kernel:
    def __init__(self, library, handle):
        self.library = library  # a kernel handle dies with its library
        self.handle = handle

    def encode(self, arguments, grid, group=None):
        """arguments: {index: Tensor or int}; grid / group: 1 to 3 dimensions."""
        etmetal_py.check(lib.aoti_torch_mps_start_encoding(self.handle), "start_encoding")
        for index, value in sorted(arguments.items()):
            if isinstance(value, Tensor):
                etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(self.handle, index, value.handle))
            else:
                etmetal_py.check(lib.aoti_torch_mps_set_arg_int(self.handle, index, int(value)))
        grid = [int(g) for g in np.atleast_1d(grid)]
        lengths = ffi.new("uint64_t[]", grid)
        if group is None:
            code = lib.aoti_torch_mps_dispatch_array(self.handle, lengths, len(grid))
        else:
            group = [int(g) for g in np.atleast_1d(group)]
            code = lib.aoti_torch_mps_dispatch_array_with_group_size(
                self.handle, lengths, len(grid), ffi.new("uint64_t[]", group), len(group))
        etmetal_py.check(code, "dispatch")

    def run(self, arguments, grid, group=None):
        self.encode(arguments, grid, group)
        etmetal_py.synchronize()

    def run_expecting_error(self, arguments, grid, group=None):
        """Runs and returns the error message the dispatch or the synchronize reported."""
        try:
            self.encode(arguments, grid, group)
            etmetal_py.synchronize()
        except etmetal_py.EtmetalError as error:
            # A failed dispatch also poisons the stream: the next synchronize reports it once.
            try:
                etmetal_py.synchronize()
            except etmetal_py.EtmetalError:
                pass
            return str(error)
        raise AssertionError("the dispatch succeeded but was expected to fail")


def device_array(array):
    """A device tensor holding a copy of `array`."""
    return Tensor.from_array(np.ascontiguousarray(array), copy=True)
