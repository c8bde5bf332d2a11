"""Run Metal kernels directly from Python, on the active device (Metal or the CPU device).

    library = etmetal_py.kernels.compile_library(source)
    add = library.function("add")
    add(out, a, b, threads=len(out))          # numpy arrays or CPU torch tensors
    scale(out, x, 2.5, np.int32(3), threadgroups=(8, 1, 1), group=(64, 1, 1))

Arrays are bound in place where the device can use their memory, and copied in and back out
otherwise (always for non-contiguous arrays: kernels index their buffers linearly); the call waits for the kernel, so results are in the arrays when it returns.
Python ints travel as 8 bytes (MSL `constant long&`), Python floats as float32 (`constant
float&`), numpy scalars with their own type.
"""

from __future__ import annotations

import numpy as np

from ._ffi import check, ffi, lib
from .tensors import CPU, MPS, Tensor, _as_array, synchronize


class Library:
    """A compiled MSL library (aoti_torch_mps_create_shader_library)."""

    def __init__(self, source: str):
        handle = ffi.new("AOTIMetalShaderLibraryHandle*")
        check(lib.aoti_torch_mps_create_shader_library(source.encode(), handle),
              "compiling the shader library")
        self.handle = handle[0]

    def function(self, name: str, constants: dict | None = None) -> "Function":
        """The kernel `name`; `constants` gives function constant values ([[function_constant(n)]])
        by index or by name: {0: 3, "use_bias": True}. bool, int and float values convert to the
        constant's declared type (a bool constant takes only a bool)."""
        out = ffi.new("AOTIMetalKernelFunctionHandle*")
        if not constants:
            check(lib.aoti_torch_mps_get_kernel_function(self.handle, name.encode(), out), name)
            return Function(self, name, out[0])
        entries = ffi.new("etmetal_function_constant_t[]", len(constants))
        keep = []  # the name strings must outlive the call
        for entry, (key, value) in zip(entries, constants.items()):
            if isinstance(key, str):
                keep.append(ffi.new("char[]", key.encode()))
                entry.name = keep[-1]
            elif isinstance(key, (int, np.integer)) and not isinstance(key, bool) and key >= 0:
                entry.index = int(key)
            else:
                raise TypeError(f"function constant key {key!r}: use an index (int >= 0) or a name")
            if isinstance(value, (bool, np.bool_)):
                entry.kind, entry.int_value = lib.ETMETAL_CONSTANT_BOOL, int(bool(value))
            elif isinstance(value, (int, np.integer)):
                entry.kind, entry.int_value = lib.ETMETAL_CONSTANT_INT, int(value)
            elif isinstance(value, (float, np.floating)):
                entry.kind, entry.float_value = lib.ETMETAL_CONSTANT_FLOAT, float(value)
            else:
                raise TypeError(f"function constant {key!r}: {type(value).__name__} is not bool, int or float")
        check(lib.etmetal_get_kernel_function_with_constants(
            self.handle, name.encode(), entries, len(constants), out), name)
        return Function(self, name, out[0])

    def close(self) -> None:
        """Deletes the library (waiting for this thread's work first); its functions die too."""
        if self.handle is not None:
            synchronize()
            check(lib.aoti_torch_mps_delete_shader_library(self.handle), "deleting the library")
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def compile_library(source: str) -> Library:
    return Library(source)


def _dims(value) -> list:
    dims = [int(v) for v in np.atleast_1d(value)]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a dispatch has 1 to 3 dimensions, not {len(dims)}")
    return dims


class Function:
    """One kernel of a Library; calling it binds the arguments in order and dispatches."""

    def __init__(self, library: Library, name: str, handle):
        self.library = library  # the function lives as long as its library
        self.name = name
        self.handle = handle

    def __call__(self, *arguments, threads=None, threadgroups=None, group=None):
        if (threads is None) == (threadgroups is None):
            raise ValueError("give exactly one of threads= and threadgroups=")
        if threadgroups is not None and group is None:
            raise ValueError("threadgroups= needs group=")
        # Prepare every argument first: making device copies may wait on the stream, which
        # ends any encoding in progress.
        prepared = [self._prepare(index, value) for index, value in enumerate(arguments)]
        check(lib.aoti_torch_mps_start_encoding(self.handle), self.name)
        for index, (kind, payload, _copy_back) in enumerate(prepared):
            if kind == "int":
                check(lib.aoti_torch_mps_set_arg_int(self.handle, index, payload), self.name)
            else:
                check(lib.aoti_torch_mps_set_arg_tensor(self.handle, index, payload.handle), self.name)
        if threadgroups is not None:
            group_dims = _dims(group)
            grid = [g * s for g, s in zip(_dims(threadgroups), group_dims)]
        else:
            grid = _dims(threads)
            group_dims = None if group is None else _dims(group)
        lengths = ffi.new("uint64_t[]", grid)
        if group_dims is None:
            code = lib.aoti_torch_mps_dispatch_array(self.handle, lengths, len(grid))
        else:
            if len(group_dims) != len(grid):
                raise ValueError("group= must have as many dimensions as the grid")
            code = lib.aoti_torch_mps_dispatch_array_with_group_size(
                self.handle, lengths, len(grid), ffi.new("uint64_t[]", group_dims), len(group_dims))
        check(code, self.name)
        synchronize()
        for _kind, tensor, copy_back in prepared:
            if copy_back is not None:
                copy_back[...] = tensor._view()

    @staticmethod
    def _prepare(index: int, value):
        """(kind, int or Tensor, array to copy the result back into or None)."""
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"argument {index}: pass booleans as numpy.uint8 or numpy.int32")
        if isinstance(value, int):
            return "int", value, None
        if isinstance(value, (float, np.generic)):
            scalar = np.asarray(value, dtype=np.float32 if isinstance(value, float) else None)
            return "tensor", Tensor.from_array(scalar.reshape(()), device=CPU, copy=True), None
        array, _code = _as_array(value)
        # Kernels index their buffers linearly: strided arrays travel as packed copies.
        tensor = Tensor.from_array(value, copy=not array.flags.c_contiguous)
        in_place = array.size == 0 or tensor.data_ptr == array.__array_interface__["data"][0]
        if in_place or not array.flags.writeable:
            return "tensor", tensor, None
        return "tensor", tensor, array


__all__ = ["Function", "Library", "compile_library"]
