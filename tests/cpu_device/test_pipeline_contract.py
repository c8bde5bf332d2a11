"""The CPU pipeline contract (cpu_pipeline.h) driven from C++ where the C ABI does not reach:
dynamic [[threadgroup(n)]] memory, the 32 KiB limit, argument-table checks, concurrent
dispatches from two threads."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "native" / "device" / "cpu"
SOURCES = ["msl_overload_sets.cpp", "msl_barrier_regions.cpp", "msl_function_constants.cpp", "msl_lexer.cpp", "msl_preprocessor.cpp",
           "msl_library.cpp", "msl_translator.cpp", "kernel_cache.cpp", "kernel_compiler.cpp", "kernel_faults.cpp",
           "cpu_executor.cpp", "dispatch_counters.cpp", "dispatch_validation.cpp", "fiber_context.cpp"]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    import etmetal_py

    compiler = shutil.which("g++") or shutil.which("clang++")
    assert compiler, "the CPU device needs a C++ compiler"
    # The embedded files are generated beside the library under test, whatever its build folder.
    generated = Path(etmetal_py.library_path()).parent / "device" / "cpu"
    embedded = [generated / "cpu_embedded_headers.cpp", generated / "cpu_translator_sources.cpp"]
    if not all(path.exists() for path in embedded):
        pytest.skip(f"{generated} lacks the embedded files: the library under test is not a meson build")
    inputs = [CPU / name for name in SOURCES] + [ROOT / "native" / "device" / "settings.cpp", *embedded,
                                                 Path(__file__).with_name("pipeline_driver.cpp")]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in inputs)).hexdigest()[:16]
    binary = tmp_path_factory.getbasetemp() / f"pipeline_driver-{digest}"
    if not binary.exists():
        command = [compiler, "-std=c++17", "-O1", "-pthread", f"-I{ROOT / 'native'}",
                   *map(str, inputs), "-ldl", "-o", str(binary)]
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-4000:]
    return binary


def test_pipeline_contract(driver, tmp_path):
    env = dict(os.environ, ETMETAL_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run([str(driver)], capture_output=True, text=True, env=env, timeout=600)
    lines = result.stdout.splitlines()
    failed = [line for line in lines if " ok" not in line]
    assert not failed and result.returncode == 0, result.stdout + result.stderr
    names = {line.split()[0] for line in lines}
    assert names == {"dynamic_threadgroup_memory", "static_threadgroup_memory_length",
                     "threadgroup_memory_limit", "unbound_buffer", "reference_length",
                     "concurrent_dispatches"}
