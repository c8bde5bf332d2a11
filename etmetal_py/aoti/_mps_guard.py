"""A no-op device guard for "mps" on torch builds without MPS (see tracing_mps_guard.cpp).

The guard is a few lines of C++ against torch's c10 headers, compiled on first use with the
host C++ compiler (the one AOTInductor uses too) into etmetal's cache, keyed by its source,
the torch version and the compiler, and loaded once per process.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

_SOURCE = Path(__file__).with_name("tracing_mps_guard.cpp")
_lock = threading.Lock()
_loaded: ctypes.CDLL | None = None


class GuardBuildError(RuntimeError):
    """The "mps" tracing guard could not be built."""


def _cache_directory() -> Path:
    override = os.environ.get("ETMETAL_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "etmetal"


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise GuardBuildError("exporting for mps on a host without MPS needs a C++ compiler "
                          "(set CXX or put g++ / clang++ on PATH)")


def _build() -> Path:
    torch_dir = Path(torch.__file__).resolve().parent
    compiler = _compiler()
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, torch.__version__.encode(), compiler.encode(),
                                     str(torch_dir).encode()])).hexdigest()[:24]
    folder = _cache_directory() / "torch-mps-guard"
    target = folder / f"tracing_mps_guard-{key}.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as work:
        output = Path(work) / target.name
        command = [compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-w",
                   f"-I{torch_dir / 'include'}", str(_SOURCE), f"-L{torch_dir / 'lib'}", "-lc10",
                   f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(output)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise GuardBuildError("building the mps tracing guard failed:\n"
                                  + (result.stderr or result.stdout)[-2000:])
        os.replace(output, target)  # atomic: concurrent builders agree on the result
    return target


def ensure_mps_device_guard() -> None:
    """Registers the no-op "mps" device guard once per process, when torch has no MPS."""
    global _loaded
    from ._compat import mps_available

    if mps_available():
        return
    with _lock:
        if _loaded is None:
            _loaded = ctypes.CDLL(str(_build()), mode=os.RTLD_NOW | os.RTLD_LOCAL)
