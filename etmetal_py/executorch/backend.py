"""Registers libetmetal_executorch, etmetal's ExecuTorch backend "MetalBackend", with the
ExecuTorch runtime of this process (the executorch wheel's libexecutorch, which
`executorch.runtime` and `portable_lib` use)."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

from ..aoti.runner import PackageError, check_model_symbols
from .export import METAL_BACKEND_ID, require_executorch

LIBRARY_ENV = "ETMETAL_EXECUTORCH_LIBRARY"
_LIBRARY_NAME = ("libetmetal_executorch.dylib" if sys.platform == "darwin"
                 else "libetmetal_executorch.so")
_PACKAGE_DIR = Path(__file__).resolve().parent.parent

_lock = threading.Lock()
_registered: str | None = None


class BackendRegistrationError(RuntimeError):
    """libetmetal_executorch could not be loaded or did not register "MetalBackend"."""


def backend_library_path() -> Path:
    """$ETMETAL_EXECUTORCH_LIBRARY, else the packaged library, else the development build."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise BackendRegistrationError(f"{LIBRARY_ENV}={override} does not name a file")
        return path.resolve()
    for candidate in (_PACKAGE_DIR / _LIBRARY_NAME,
                      _PACKAGE_DIR.parent / "build" / "native" / "executorch" / _LIBRARY_NAME):
        if candidate.is_file():
            return candidate
    raise BackendRegistrationError(
        f"{_LIBRARY_NAME} not found: it is built when meson finds ExecuTorch (install "
        "executorch==1.5.1, then rebuild), or set " + LIBRARY_ENV)


def registered_backend_names() -> list[str]:
    from executorch.extension.pybindings import portable_lib

    return list(portable_lib._get_registered_backend_names())


def register_backend() -> str:
    """Loads libetmetal_executorch into this process so that ExecuTorch's runtime runs Metal
    delegates through libetmetal. Idempotent; returns the library's path."""
    global _registered
    with _lock:
        if _registered is not None:
            return _registered
        require_executorch()
        from .. import _ffi  # noqa: F401  (libetmetal first: the backend links it)

        path = str(backend_library_path())
        if METAL_BACKEND_ID in registered_backend_names():
            raise BackendRegistrationError(
                f"another library already registered {METAL_BACKEND_ID!r} in this process")
        # RTLD_LOCAL: libetmetal, its dependency, stays out of the global scope, where it would
        # interpose on libtorch's aoti_torch_* for stock torch packages. RTLD_DEEPBIND (glibc)
        # only where another library in the global scope defines some of the backend's
        # aoti_torch_* names: deep binding also bypasses interposed allocators and sanitizers.
        try:
            deep_bind = check_model_symbols(path, subject=os.path.basename(path))
        except PackageError as exc:
            raise BackendRegistrationError(str(exc)) from None
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL | (os.RTLD_DEEPBIND if deep_bind else 0))
        except OSError as exc:
            raise BackendRegistrationError(f"cannot load {path}: {exc}") from None
        if METAL_BACKEND_ID not in registered_backend_names():
            raise BackendRegistrationError(
                f"{path} loaded but {METAL_BACKEND_ID!r} is not registered: it was built "
                "against a different libexecutorch than the executorch package's")
        _registered = path
        return path
