"""Two threads hammering allocation, views, copies and frees at once."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import etmetal_py
from etmetal_testing import new_handle_out
from etmetal_py import Tensor, ffi, lib

ROOT = Path(__file__).resolve().parents[1]


def hammer(seed: int, rounds: int, errors: list):
    rng = np.random.default_rng(seed)
    try:
        for _ in range(rounds):
            n = int(rng.integers(1, 5000))
            values = rng.standard_normal(n).astype(np.float32)
            a = Tensor.from_array(values, copy=True)
            b = Tensor.empty([n], np.float16)
            etmetal_py.check(lib.aoti_torch_copy_(b.handle, a.handle, 0))
            out = new_handle_out()
            etmetal_py.check(lib.aoti_torch_clone(b.handle, out))
            c = Tensor(out[0])
            raw = lib.metal_allocate_buffer(n * 4)
            etmetal_py.check(lib.aoti_torch_mps_copy_buffer(ffi.cast("void*", a.data_ptr), raw,
                                                            n * 4, 0, 0))
            etmetal_py.synchronize()
            np.testing.assert_array_equal(c.numpy(), values.astype(np.float16))
            np.testing.assert_array_equal(np.frombuffer(ffi.buffer(raw, n * 4), np.float32), values)
            lib.metal_deallocate_buffer(raw)
            for t in (a, b, c):
                t.delete()
    except Exception as error:  # reported by the main thread
        errors.append(error)


def test_two_threads_allocate_and_copy_concurrently(no_leaks):
    errors = []
    threads = [threading.Thread(target=hammer, args=(seed, 150, errors)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []



AFFINE = """
#include <metal_stdlib>
using namespace metal;
kernel void affine(device uint* x [[buffer(0)]], constant uint* ab [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) { x[i] = x[i] * ab[0] + ab[1]; }
"""


def test_eight_threads_pass_tensors_without_waiting(no_leaks):
    """Cross-thread ordering: each thread applies x = 3x + (its index + 1) in place a few
    times (order matters), only commits (no wait) and hands the tensor to the next thread.
    The receiving thread's work, and the final host read on the main thread, must come after
    every earlier thread's."""
    import queue

    from etmetal_py.kernels import compile_library

    library = compile_library(AFFINE)
    affine = library.function("affine")
    threads, tokens, laps, repeats, n = 8, 4, 2, 8, 1 << 20
    coefficients = [Tensor.from_array(np.array([3, i + 1], dtype=np.uint32), copy=True)
                    for i in range(threads)]
    inboxes = [queue.Queue() for _ in range(threads)]
    finished, errors = queue.Queue(), []

    def worker(index):
        try:
            for _ in range(tokens * laps):
                token, hops = inboxes[index].get()
                if token is None:
                    return
                for _ in range(repeats):
                    etmetal_py.check(lib.aoti_torch_mps_start_encoding(affine.handle))
                    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(affine.handle, 0, token.handle))
                    etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(
                        affine.handle, 1, coefficients[index].handle))
                    etmetal_py.check(lib.aoti_torch_mps_dispatch_single(affine.handle, n))
                etmetal_py.synchronize(1)  # COMMIT: submitted, not waited for
                hops += 1
                if hops == threads * laps:
                    finished.put(token)
                else:
                    inboxes[(index + 1) % threads].put((token, hops))
            etmetal_py.synchronize()
        except Exception as error:  # reported by the main thread
            errors.append(error)
            for box in inboxes:
                box.put((None, None))

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for k in range(tokens):
        inboxes[0].put((Tensor.from_array(np.full(n, k, dtype=np.uint32), copy=True), 0))
    results = [finished.get(timeout=600) for _ in range(tokens)]
    for t in workers:
        t.join()
    assert not errors, errors
    expected = []
    for start in range(tokens):
        value = start
        for hop in range(threads * laps):
            for _ in range(repeats):
                value = (value * 3 + hop % threads + 1) % (1 << 32)
        expected.append(value)
    observed = []
    for token in results:
        data = token.numpy()
        assert (data == data[0]).all()
        observed.append(int(data[0]))
        token.delete()
    assert sorted(observed) == sorted(expected)
    for c in coefficients:
        c.delete()


def test_tensor_wait_covers_another_threads_committed_work(no_leaks):
    """etmetal_tensor_wait (what Tensor.delete calls before dropping memory it wraps in place)
    returns only once another thread's committed work on the tensor has finished."""
    from etmetal_py.kernels import compile_library

    affine = compile_library(AFFINE).function("affine")
    n, repeats = 1 << 20, 16
    token = Tensor.from_array(np.zeros(n, dtype=np.uint32), copy=True)
    coefficients = Tensor.from_array(np.array([1, 1], dtype=np.uint32), copy=True)
    memory = np.frombuffer(ffi.buffer(ffi.cast("char*", token.data_ptr), n * 4), np.uint32)
    committed = threading.Event()

    def writer():
        for _ in range(repeats):
            etmetal_py.check(lib.aoti_torch_mps_start_encoding(affine.handle))
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(affine.handle, 0, token.handle))
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(affine.handle, 1, coefficients.handle))
            etmetal_py.check(lib.aoti_torch_mps_dispatch_single(affine.handle, n))
        etmetal_py.synchronize(1)  # COMMIT only
        committed.set()

    thread = threading.Thread(target=writer)
    thread.start()
    committed.wait(timeout=300)
    etmetal_py.check(lib.etmetal_tensor_wait(token.handle))
    assert (memory == repeats).all()  # read through the raw pointer: no other wait
    thread.join()
    for t in (token, coefficients):
        t.delete()


@pytest.mark.parametrize("execution", ["", "fibers", "regions"])
def test_cpp_host_eight_threads(cpp_threads_host, execution):
    """tests/threads_host.cpp: eight C++ threads compile one source at once, run barrier and
    simd_sum kernels, and pass a tensor around a ring without waiting (tools/run_tsan.sh runs
    the same program under ThreadSanitizer). The execution path is a CPU-device setting that
    Metal ignores."""
    env = {**os.environ, "ETMETAL_CPU_EXECUTION": execution}
    result = subprocess.run([str(cpp_threads_host)], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr


@pytest.fixture(scope="module")
def cpp_threads_host(tmp_path_factory):
    library = Path(etmetal_py.library_path())
    binary = tmp_path_factory.mktemp("threads_host") / "threads_host"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'native' / 'include'}", str(ROOT / "tests" / "threads_host.cpp"),
                    f"-L{library.parent}", f"-l:{library.name}", f"-Wl,-rpath,{library.parent}",
                    "-pthread", "-o", str(binary)], check=True)
    return binary


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks an ELF flag and /proc/self/maps")
def test_library_stays_mapped_after_dlclose():
    """libetmetal runs threads of its own (CPU-device workers, the kernel watchdog) and installs
    signal handlers, so a host's dlclose must not unmap it: a watchdog that woke after cffi
    unloaded the library at interpreter exit crashed the process (seen on a 16-core host)."""
    library = str(etmetal_py.library_path())
    script = f"""
import ctypes, _ctypes
handle = ctypes.CDLL({library!r}, mode=ctypes.RTLD_LOCAL)
assert {library!r} in open("/proc/self/maps").read()
_ctypes.dlclose(handle._handle)
print({library!r} in open("/proc/self/maps").read())
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True", "dlclose unmapped libetmetal (link it with -z nodelete)"
