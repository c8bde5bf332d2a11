"""etmetal: run PyTorch AOTInductor models compiled for Apple GPUs ("mps") through libetmetal,
on Metal or on the CPU device.

``etmetal_py.lib`` / ``etmetal_py.ffi`` give the raw C API; ``etmetal_py.Tensor`` wraps arrays
as ABI tensors; ``export``, ``aoti_compile_and_package`` and ``aoti_load_package`` compile and
run models (imported on first use, since they need torch).
"""

from ._ffi import EtmetalError, check, ffi, last_error, lib, library_path
from .counters import counters
from .tensors import CPU, MPS, Tensor, synchronize

__version__ = ffi.string(lib.etmetal_version()).decode()

_AOTI_NAMES = ("export", "aoti_compile_and_package", "aoti_load_package")


def __getattr__(name):
    if name in _AOTI_NAMES:
        from . import aoti

        return getattr(aoti, name)
    raise AttributeError(f"module 'etmetal_py' has no attribute {name!r}")


def device_name() -> str:
    return ffi.string(lib.etmetal_device_name()).decode()


def device_kind() -> str:
    return ffi.string(lib.etmetal_device_kind()).decode()


__all__ = [
    "CPU", "MPS", "EtmetalError", "Tensor", "check", "counters", "device_kind", "device_name", "ffi",
    "last_error", "lib", "library_path", "synchronize", *_AOTI_NAMES,
]
