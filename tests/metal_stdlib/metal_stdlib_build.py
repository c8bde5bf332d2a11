"""Builds and runs the small C++ programs that test the emulated Metal standard library
(native/device/cpu/metal_include) with the host compiler, as the CPU device compiles kernels.

A plain module rather than a conftest.py: test files of other folders import their own
`conftest`, and a second module of that name would shadow theirs in a combined run."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
METAL_INCLUDE = ROOT / "native/device/cpu/metal_include"
PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"
# The flags the CPU device compiles translated kernels with (MSL literals are float).
KERNEL_FLAGS = ["-fsingle-precision-constant", "-Wall", "-Werror", "-Wno-unused-variable",
                "-Wno-unused-but-set-variable"]


def compiler():
    found = os.environ.get("CXX") or shutil.which("g++")
    if not found:
        pytest.skip("no C++ compiler (g++) on this machine")
    return found


def torch_include():
    torch = pytest.importorskip("torch")
    return pathlib.Path(torch.__file__).parent / "include"


def compile_program(source, output, std="c++20", extra_flags=(), optimize="-O1"):
    """Compiles one test program; fails the test with the compiler's message on error."""
    command = [compiler(), f"-std={std}", optimize, *KERNEL_FLAGS, f"-I{METAL_INCLUDE}",
               *extra_flags, str(source), "-o", str(output), "-pthread"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"compile failed: {' '.join(command)}\n{result.stderr[-6000:]}"
    return output


def run_program(binary, stdin_text=None, timeout=120, with_stderr=False):
    """The program's standard output (and error, with with_stderr); fails the test when it
    exits non-zero."""
    result = subprocess.run([str(binary)], input=stdin_text, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{binary.name} failed ({result.returncode}):\n" \
                                   f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return (result.stdout, result.stderr) if with_stderr else result.stdout


def parse_tables(text):
    """Lines `name v0 v1 ...` -> {name: [v0, v1, ...]} (values kept as strings)."""
    tables = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, *values = line.split()
        assert name not in tables, f"duplicate output line {name}"
        tables[name] = values
    return tables


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("metal_stdlib")
