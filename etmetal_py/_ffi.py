"""cffi binding of libetmetal (ABI mode).

The cdef is read from the public C headers at import time, so the binding and the library
cannot disagree. The library is loaded RTLD_LOCAL: its ``aoti_torch_*`` symbols must not
interpose on libtorch's (a stock torch AOTI package in the same process binds to libtorch).
Model libraries compiled by etmetal link libetmetal themselves (see ``aoti/runner.py``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import cffi

_PACKAGE_DIR = Path(__file__).resolve().parent
_SOURCE_ROOT = _PACKAGE_DIR.parent
_LIBRARY_NAME = "libetmetal.dylib" if sys.platform == "darwin" else "libetmetal.so"
# The headers that declare types others use come first; etmetal_decls.h holds only
# preprocessor definitions.
_FIRST_HEADERS = ("aoti_shim.h", "aoti_shim_mps.h")
_SKIPPED_HEADERS = ("etmetal_decls.h",)


class EtmetalError(RuntimeError):
    """A libetmetal call failed; the message is the runtime's."""


def _header_dir() -> Path:
    for candidate in (_PACKAGE_DIR / "include" / "etmetal", _SOURCE_ROOT / "native" / "include" / "etmetal"):
        if (candidate / "etmetal.h").is_file():
            return candidate
    raise ImportError("etmetal_py: the etmetal C headers are missing (neither installed with the "
                      "package nor in a source tree)")


def library_path() -> Path:
    """The libetmetal this process uses: $ETMETAL_LIBRARY, else the packaged one, else a
    development build in the source tree's build/ folder."""
    override = os.environ.get("ETMETAL_LIBRARY")
    if override:
        path = Path(override)
        if not path.is_file():
            raise ImportError(f"ETMETAL_LIBRARY={override} does not name a file")
        return path.resolve()
    for candidate in (_PACKAGE_DIR / _LIBRARY_NAME, _SOURCE_ROOT / "build" / "native" / _LIBRARY_NAME):
        if candidate.is_file():
            return candidate
    raise ImportError(f"etmetal_py: {_LIBRARY_NAME} not found; install the package "
                      "(pip install .) or set ETMETAL_LIBRARY")


def cdef_source() -> str:
    """The C declarations of the public headers, preprocessed for cffi."""
    parts = []
    directory = _header_dir()
    rest = sorted(p.name for p in directory.glob("*.h")
                  if p.name not in _FIRST_HEADERS + _SKIPPED_HEADERS)
    for name in _FIRST_HEADERS + tuple(rest):
        text = (directory / name).read_text()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        lines = [
            line for line in text.splitlines()
            if not line.lstrip().startswith("#")
            and line.strip() not in ("ETMETAL_BEGIN_DECLS", "ETMETAL_END_DECLS")
        ]
        parts.append("\n".join(lines).replace("ETMETAL_API ", ""))
    return "\n".join(parts)


ffi = cffi.FFI()
ffi.cdef(cdef_source())
lib = ffi.dlopen(str(library_path()), ffi.RTLD_LOCAL | ffi.RTLD_NOW)


def last_error() -> str:
    return ffi.string(lib.etmetal_last_error()).decode("utf-8", "replace")


def check(code: int, what: str = "") -> None:
    """Raises EtmetalError with the runtime's message when a call returned non-zero."""
    if code != 0:
        message = last_error()
        # The library names the C function that failed; `what` adds context it lacks.
        named = not what or message.startswith(f"{what}:")
        raise EtmetalError(message if named else f"{what}: {message}")
