"""ABI tensors from Python: wrap numpy arrays and torch tensors as ``AtenTensorHandle``s and
read them back.

``Tensor`` owns one handle and deletes it when collected. Wrapping is zero-copy where the
device can use the memory in place (page-aligned memory on Metal; never on the CPU device,
which keeps a kernel's stray writes away from Python's heap); otherwise the data is copied
into device memory. Reading back synchronizes the calling thread's stream first.
"""

from __future__ import annotations

import numpy as np

from ._ffi import EtmetalError, check, ffi, lib

CPU = 0
MPS = 13

# c10::ScalarType codes of the dtypes numpy can hold directly.
_NUMPY_BY_CODE = {
    0: np.dtype(np.uint8), 1: np.dtype(np.int8), 2: np.dtype(np.int16), 3: np.dtype(np.int32),
    4: np.dtype(np.int64), 5: np.dtype(np.float16), 6: np.dtype(np.float32),
    7: np.dtype(np.float64), 11: np.dtype(np.bool_), 27: np.dtype(np.uint16),
    28: np.dtype(np.uint32), 29: np.dtype(np.uint64),
    9: np.dtype(np.complex64), 10: np.dtype(np.complex128),
}
_CODE_BY_NUMPY = {dtype: code for code, dtype in _NUMPY_BY_CODE.items()}
BFLOAT16 = 15
COMPLEX32 = 8  # two float16; numpy has no such type: its elements travel as uint32


def dtype_code(dtype) -> int:
    """c10 ScalarType code of a numpy dtype, torch dtype or code."""
    if isinstance(dtype, int):
        return dtype
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and isinstance(dtype, torch.dtype):
        if dtype == torch.bfloat16:
            return BFLOAT16
        if dtype == torch.complex32:
            return COMPLEX32
        dtype = torch.empty((), dtype=dtype).numpy().dtype
    code = _CODE_BY_NUMPY.get(np.dtype(dtype))
    if code is None:
        raise TypeError(f"dtype {dtype} has no etmetal equivalent")
    return code


def _storage_dtype(code: int) -> np.dtype:
    """numpy dtype with the element's size and bits (bfloat16 travels as uint16)."""
    if code == BFLOAT16:
        return np.dtype(np.uint16)
    if code == COMPLEX32:
        return np.dtype(np.uint32)
    try:
        return _NUMPY_BY_CODE[code]
    except KeyError:
        raise TypeError(f"dtype code {code} has no numpy equivalent") from None


class Tensor:
    """Owner of one ABI tensor handle."""

    def __init__(self, handle, keepalive=None):
        if handle == ffi.NULL:
            raise ValueError("null tensor handle")
        self.handle = handle
        self._keepalive = keepalive  # memory the tensor wraps without copying

    # -- construction -----------------------------------------------------------------
    @classmethod
    def empty(cls, sizes, dtype=np.float32, strides=None, device=MPS) -> "Tensor":
        sizes = [int(s) for s in sizes]
        out = ffi.new("AtenTensorHandle*")
        c_strides = ffi.NULL if strides is None else ffi.new("int64_t[]", [int(s) for s in strides])
        check(lib.aoti_torch_empty_strided(len(sizes), ffi.new("int64_t[]", sizes), c_strides,
                                           dtype_code(dtype), device, 0, out),
              "aoti_torch_empty_strided")
        return cls(out[0])

    @classmethod
    def from_array(cls, array, device=MPS, copy=False) -> "Tensor":
        """Wraps a numpy array or a CPU torch tensor, keeping its strides. Zero-copy unless
        `copy` is true or the device cannot use the memory in place."""
        array, code = _as_array(array)
        if array.size and not copy:
            wrapped = _wrap(array, code, device)
            if wrapped is not None:
                return wrapped
        tensor = cls.empty(array.shape, code, device=device)
        tensor._write(array, code)
        return tensor

    # -- properties -------------------------------------------------------------------
    def _get(self, function, ctype):
        out = ffi.new(ctype)
        check(function(self.handle, out), function.__name__)
        return out[0]

    @property
    def dim(self) -> int:
        return self._get(lib.aoti_torch_get_dim, "int64_t*")

    @property
    def sizes(self) -> tuple:
        pointer = self._get(lib.aoti_torch_get_sizes, "int64_t**")
        return tuple(pointer[i] for i in range(self.dim))

    @property
    def strides(self) -> tuple:
        pointer = self._get(lib.aoti_torch_get_strides, "int64_t**")
        return tuple(pointer[i] for i in range(self.dim))

    @property
    def dtype(self) -> int:
        return self._get(lib.aoti_torch_get_dtype, "int32_t*")

    @property
    def storage_offset(self) -> int:
        return self._get(lib.aoti_torch_get_storage_offset, "int64_t*")

    @property
    def data_ptr(self) -> int:
        return int(ffi.cast("uintptr_t", self._get(lib.aoti_torch_get_data_ptr, "void**")))

    @property
    def numel(self) -> int:
        return self._get(lib.aoti_torch_get_numel, "int64_t*")

    # -- data -------------------------------------------------------------------------
    def _view(self) -> np.ndarray:
        """A numpy view of the tensor's memory (no synchronization)."""
        dtype = _storage_dtype(self.dtype)
        sizes, strides = self.sizes, self.strides
        if self.numel == 0:
            return np.empty(sizes, dtype)
        extent = 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
        flat = np.frombuffer(ffi.buffer(ffi.cast("char*", self.data_ptr), extent * dtype.itemsize),
                             dtype=dtype)
        return np.lib.stride_tricks.as_strided(
            flat, shape=sizes, strides=[st * dtype.itemsize for st in strides])

    def numpy(self) -> np.ndarray:
        """A copy of the contents, after the calling thread's stream has finished.
        bfloat16 comes back as float32, complex32 as complex64."""
        synchronize()
        data = np.array(self._view(), copy=True)
        if self.dtype == BFLOAT16:
            data = (data.astype(np.uint32) << 16).view(np.float32)
        if self.dtype == COMPLEX32:
            parts = data.view(np.float16).reshape(data.shape + (2,)).astype(np.float32)
            data = parts.view(np.complex64).reshape(data.shape)
        return data

    def torch(self):
        """A CPU torch tensor copy (bfloat16 and complex32 preserved)."""
        import torch

        synchronize()
        data = np.array(self._view(), copy=True)
        if self.dtype == BFLOAT16:
            return torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
        if self.dtype == COMPLEX32:
            return torch.from_numpy(data.view(np.int32)).view(torch.complex32)
        return torch.from_numpy(data)

    def write(self, array) -> None:
        """Copies `array` (same shape) into the tensor, after the stream has finished."""
        self._write(*_as_array(array))

    def _write(self, array: np.ndarray, code: int) -> None:
        if tuple(array.shape) != self.sizes:
            raise ValueError(f"shape {array.shape} does not match the tensor's {self.sizes}")
        if code != self.dtype:
            raise TypeError(f"dtype code {code} does not match the tensor's {self.dtype}")
        synchronize()
        self._view()[...] = array

    def _release_memory(self) -> None:
        """Memory wrapped in place may be freed only once no submitted work uses it."""
        if self._keepalive is not None:
            lib.etmetal_tensor_wait(self.handle)
            self._keepalive = None

    def delete(self) -> None:
        if self.handle is not None:
            self._release_memory()
            check(lib.aoti_torch_delete_tensor_object(self.handle), "aoti_torch_delete_tensor_object")
            self.handle = None

    def release(self):
        """Gives up ownership of the handle (for calls that take it over)."""
        handle, self.handle = self.handle, None
        return handle

    def __del__(self):
        if getattr(self, "handle", None) is not None:
            try:
                self._release_memory()
                lib.aoti_torch_delete_tensor_object(self.handle)
            except Exception:
                pass

    def __repr__(self):
        return f"etmetal_py.Tensor(sizes={self.sizes}, strides={self.strides}, dtype={self.dtype})"


def _as_array(value):
    """(numpy array with the element bits, dtype code) of a numpy array or CPU torch tensor."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError("only CPU torch tensors can be wrapped")
        tensor = value.detach()
        if tensor.dtype == torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(np.uint16), BFLOAT16
        if tensor.dtype == torch.complex32:
            return tensor.view(torch.int32).numpy().view(np.uint32), COMPLEX32
        return tensor.numpy(), dtype_code(tensor.dtype)
    array = np.asarray(value)
    return array, dtype_code(array.dtype)


def _wrap(array: np.ndarray, code: int, device: int):
    itemsize = array.dtype.itemsize
    if any(s % itemsize for s in array.strides) or any(s < 0 for s in array.strides):
        return None
    sizes = ffi.new("int64_t[]", list(array.shape))
    strides = ffi.new("int64_t[]", [s // itemsize for s in array.strides])
    out = ffi.new("AtenTensorHandle*")
    pointer = ffi.cast("void*", array.__array_interface__["data"][0])
    check(lib.etmetal_tensor_from_blob_in_place(pointer, array.ndim, sizes, strides, 0, code,
                                                device, 0, out),
          "etmetal_tensor_from_blob_in_place")
    if out[0] == ffi.NULL:
        return None  # the device cannot use this memory in place: the caller copies
    return Tensor(out[0], keepalive=array)


def synchronize(sync_type: int = 2) -> None:
    """Applies a sync type (default COMMIT_AND_WAIT) to the calling thread's stream; raises
    EtmetalError with the sticky error if the stream has one."""
    check(lib.etmetal_synchronize(sync_type))


__all__ = ["CPU", "MPS", "BFLOAT16", "EtmetalError", "Tensor", "dtype_code", "synchronize"]
