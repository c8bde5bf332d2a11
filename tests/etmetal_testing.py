"""Helpers for tests that drive the C ABI through etmetal_py (imported by test modules)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import etmetal_py
from etmetal_py import ffi, lib


def allocator_stats():
    stats = ffi.new("etmetal_allocator_stats_t*")
    etmetal_py.check(lib.etmetal_allocator_stats(stats))
    return stats



def new_handle_out():
    return ffi.new("AtenTensorHandle*")


def empty(sizes, strides=None, dtype=6, device=13):
    """A raw handle from aoti_torch_empty_strided (caller deletes)."""
    out = new_handle_out()
    c_strides = ffi.NULL if strides is None else ffi.new("int64_t[]", list(strides))
    etmetal_py.check(lib.aoti_torch_empty_strided(len(sizes), ffi.new("int64_t[]", list(sizes)),
                                                  c_strides, dtype, device, 0, out))
    return out[0]


def fails(code, *fragments):
    """Asserts a call failed (code 1) with a message containing every fragment."""
    assert code == 1
    message = etmetal_py.last_error()
    for fragment in fragments:
        assert fragment in message, message
    return message


def host_mappings_and_rss() -> tuple[int, int] | None:
    """(memory mappings, resident KiB) of this process, from /proc; None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    with open("/proc/self/maps") as maps:
        mappings = sum(1 for _ in maps)
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return mappings, rss


def assert_host_memory_flat(before: tuple[int, int] | None, what: str) -> None:
    """Mappings and RSS no larger than `before` (within 10 mappings and 5%) after `what`. A
    model library mapped again per load adds about six mappings and 300 KiB each time."""
    if before is None:
        return
    mappings, rss = host_mappings_and_rss()
    assert mappings <= before[0] + 10, f"{what}: mappings grew {before[0]} -> {mappings}"
    assert rss <= before[1] * 1.05, f"{what}: RSS grew {before[1]} -> {rss} KiB"


def library_objects(*patterns: str, library: Path | None = None) -> list[Path]:
    """The object files of `library` (default: the libetmetal under test) whose names match
    `patterns` (meson keeps a target's objects in "<library file name>.p"). C++ test hosts link
    these to reach the internal interfaces the exported ABI hides, without compiling the
    sources again."""
    library = Path(etmetal_py.library_path()) if library is None else library
    folder = library.with_name(library.name + ".p")
    if not folder.is_dir():
        pytest.skip(f"{folder} is missing: the library under test is not a meson build")
    objects = sorted({path for pattern in patterns for path in folder.glob(pattern)})
    assert objects, f"no object in {folder} matches {patterns}"
    return objects


def build_host_program(source: Path, objects: list[Path], binary: Path, optimize: str = "-O1",
                       extra: tuple[str, ...] = ()) -> Path:
    """Compiles a C++ test host against the checkout's native/ headers and links it with
    `objects` and `extra` arguments; the failure carries the compiler's output."""
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert compiler, "no C++ compiler"
    root = Path(__file__).resolve().parents[1]
    command = [compiler, "-std=c++17", optimize, "-Wall", "-Wextra", "-Werror", "-pthread",
               f"-I{root / 'native'}", f"-I{root / 'native' / 'include'}", str(source),
               *map(str, objects), *extra, "-ldl", "-o", str(binary)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return binary
