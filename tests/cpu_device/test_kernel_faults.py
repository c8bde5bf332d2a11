"""Faults at run time that a GPU survives: integer division and remainder by zero and the
signed minimum over -1 give values (AArch64's: x / 0 = 0, x % 0 = x, MIN / -1 = MIN,
MIN % -1 = 0) instead of ending the host process with SIGFPE. A kernel that overflows its
stack, touches unmapped memory or runs past ETMETAL_KERNEL_TIMEOUT_MS fails its dispatch,
and the process (and its worker pool) keeps working."""

import json
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cpu_device_testing import require_cpu_device
from etmetal_py.kernels import compile_library

SOURCE = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;
    template <typename T>
    kernel void divide(device T* quotient [[buffer(0)]], device T* remainder [[buffer(1)]],
                       device const T* a [[buffer(2)]], device const T* b [[buffer(3)]],
                       uint i [[thread_position_in_grid]]) {
      quotient[i] = a[i] / b[i];
      remainder[i] = a[i] % b[i];
    }
    template [[host_name("divide_int")]] kernel decltype(divide<int>) divide<int>;
    template [[host_name("divide_long")]] kernel decltype(divide<long>) divide<long>;
    template [[host_name("divide_uint")]] kernel decltype(divide<uint>) divide<uint>;
    template [[host_name("divide_short")]] kernel decltype(divide<short>) divide<short>;
    """)


def reference(a, b):
    """AArch64's sdiv/udiv + msub results, element by element."""
    info = np.iinfo(a.dtype)
    quotient, remainder = np.zeros_like(a), np.zeros_like(a)
    for k, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        if y == 0:
            quotient[k], remainder[k] = 0, x
        elif info.min < 0 and x == info.min and y == -1:
            quotient[k], remainder[k] = info.min, 0
        else:
            q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # C truncates toward zero
            quotient[k], remainder[k] = q, x - q * y
    return quotient, remainder


@pytest.mark.parametrize("name, dtype", [("divide_int", np.int32), ("divide_long", np.int64),
                                         ("divide_uint", np.uint32), ("divide_short", np.int16)])
def test_division_faults_give_values(name, dtype):
    require_cpu_device()
    info = np.iinfo(dtype)
    a = np.array([7, -7, info.min, info.min, 5, -9, info.max, 0], dtype=np.int64)
    b = np.array([0, 0, -1, 0, 2, 4, -1, 0], dtype=np.int64)
    if info.min == 0:
        a, b = np.abs(a) % (int(info.max) + 1), np.abs(b)
    a, b = a.astype(dtype), b.astype(dtype)
    quotient, remainder = np.zeros_like(a), np.zeros_like(a)
    with compile_library(SOURCE) as library:
        library.function(name)(quotient, remainder, a, b, threads=len(a))
    expected_quotient, expected_remainder = reference(a, b)
    assert np.array_equal(quotient, expected_quotient)
    assert np.array_equal(remainder, expected_remainder)


def test_sigfpe_outside_kernels_keeps_its_default_action():
    require_cpu_device()
    child = textwrap.dedent("""\
        import os, signal, sys
        import numpy as np
        from etmetal_py.kernels import compile_library
        source = sys.stdin.read()
        a = np.array([1], np.int32); b = np.array([0], np.int32); q = np.zeros(1, np.int32)
        with compile_library(source) as library:
            library.function("divide_int")(q, q.copy(), a, b, threads=1)
        os.kill(os.getpid(), signal.SIGFPE)
        print("survived")
        """)
    result = subprocess.run([sys.executable, "-c", child], input=SOURCE, capture_output=True, text=True)
    assert result.returncode == -signal.SIGFPE, result.stdout + result.stderr


FAULTS = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;
    kernel void spin(volatile device int* flag [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      while (flag[0] == 0) {}
    }
    int deep(int n, volatile thread int* sink) {
      volatile int frame[64];
      frame[n % 64] = n;
      *sink += frame[(n * 7) % 64];
      return n == 0 ? 0 : deep(n - 1, sink) + frame[0];
    }
    kernel void recurse(device int* out [[buffer(0)]], constant int& depth [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
      volatile int sink = 0;
      out[i] = deep(depth, &sink);
    }
    kernel void big_frame(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]],
                          uint lane [[thread_index_in_simdgroup]]) {
      volatile float local[64 * 1024];  // 256 KiB: more than a fiber's stack
      local[i % 1024] = float(i);
      out[i] = simd_sum(local[i % 1024]);
    }
    kernel void stray(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      out[i + (1ul << 40)] = 1.0f;  // 4 TiB past the buffer
    }
    kernel void add_one(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      out[i] += 1.0f;
    }
    kernel void count_slowly(device float* work [[buffer(0)]], device uint* count [[buffer(1)]],
                             constant long& rounds [[buffer(2)]], uint i [[thread_position_in_grid]]) {
      float x = work[i];
      for (long k = 0; k < rounds; ++k) x = x * 0.5f + 1.0f;
      work[i] = x;
      count[i] += 1;
    }
    """)

FAULT_CHILD = textwrap.dedent("""\
    import json, os, sys
    import numpy as np
    import etmetal_py
    from etmetal_py.kernels import compile_library
    source = sys.stdin.read()
    for kernel, threads, env in json.loads(sys.argv[1]):
        os.environ.update(env)  # read when the library loads its kernels (and makes their pipelines)
        with compile_library(source) as library:
            arguments = {"spin": lambda: [np.zeros(1, np.int32)],
                         "recurse": lambda: [np.zeros(threads, np.int32), np.int32(10 ** 7)],
                         "big_frame": lambda: [np.zeros(threads, np.float32)],
                         "stray": lambda: [np.zeros(threads, np.float32)]}[kernel]()
            try:
                library.function(kernel)(*arguments, threads=threads)
                print("no error")
            except etmetal_py.EtmetalError as error:
                print("ERROR:" + str(error).splitlines()[0])
            try:
                etmetal_py.synchronize()
            except etmetal_py.EtmetalError:
                pass
            for name in env:
                del os.environ[name]
            # The process and every worker still run kernels.
            values = np.zeros(1 << 16, np.float32)
            library.function("add_one")(values, threads=len(values))
            print("after:", float(values.sum()))
    """)

# (kernel, threads, environment, what the dispatch's error says)
SCENARIOS = [
    ("spin", 4096, {"ETMETAL_KERNEL_TIMEOUT_MS": "300"},
     "'spin': did not finish within 300 ms (ETMETAL_KERNEL_TIMEOUT_MS); its threads were stopped"),
    ("spin", 1, {"ETMETAL_KERNEL_TIMEOUT_MS": "300"}, "'spin': did not finish within 300 ms"),
    ("recurse", 1, {"ETMETAL_CPU_EXECUTION": "loop"}, "'recurse': stack overflow in threadgroup (0, 0, 0)"),
    ("recurse", 64, {"ETMETAL_CPU_EXECUTION": "fibers"}, "'recurse': stack overflow in threadgroup (0, 0, 0)"),
    ("big_frame", 64, {"ETMETAL_CPU_EXECUTION": "fibers"}, "'big_frame': stack overflow in threadgroup (0, 0, 0)"),
    ("stray", 1, {}, "'stray': invalid memory access at 0x"),
]


def test_faults_and_endless_kernels_fail_their_dispatch_and_the_process_goes_on():
    require_cpu_device()
    plan = json.dumps([[kernel, threads, env] for kernel, threads, env, _ in SCENARIOS])
    result = subprocess.run([sys.executable, "-c", FAULT_CHILD, plan], input=FAULTS, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2 * len(SCENARIOS), result.stdout + result.stderr[-3000:]
    for k, (kernel, threads, env, expected) in enumerate(SCENARIOS):
        message, after = lines[2 * k], lines[2 * k + 1]
        assert message.startswith("ERROR:") and expected in message, (kernel, threads, env, message)
        assert after == f"after: {float(1 << 16)}", (kernel, after)


WATCHDOG_CHILD = textwrap.dedent("""\
    import os, sys, threading, time
    import numpy as np
    import etmetal_py
    from etmetal_py import Tensor, check, lib
    from etmetal_py.kernels import compile_library
    os.environ["ETMETAL_KERNEL_TIMEOUT_MS"] = "250"  # read when the library makes its pipelines
    source = sys.stdin.read()
    with compile_library(source) as library:
        # Six timeouts of dispatches encoded ahead of the queue thread, in batches: it is inside
        # one of them at nearly every poll of the watchdog, each time a different one, each far
        # shorter than the timeout.
        count_slowly = library.function("count_slowly")
        work = Tensor.from_array(np.zeros(1024, np.float32), copy=True)
        counts = Tensor.from_array(np.zeros(1024, np.uint32), copy=True)
        dispatches = 0
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for _ in range(100):
                check(lib.aoti_torch_mps_start_encoding(count_slowly.handle))
                check(lib.aoti_torch_mps_set_arg_tensor(count_slowly.handle, 0, work.handle))
                check(lib.aoti_torch_mps_set_arg_tensor(count_slowly.handle, 1, counts.handle))
                check(lib.aoti_torch_mps_set_arg_int(count_slowly.handle, 2, 200))
                check(lib.aoti_torch_mps_dispatch_single(count_slowly.handle, 1024))
            dispatches += 100
            etmetal_py.synchronize()  # the queue thread catches up in a few ms, and is idle as briefly
        correct = (np.array_equal(counts.numpy(), np.full(1024, dispatches, np.uint32)) and
                   np.array_equal(work.numpy(), np.full(1024, 2, np.float32)))  # x -> x / 2 + 1 settles at 2
        print("short dispatches:", "ok" if correct else "wrong values")

        # Two host threads (two streams) spin at once, one on the pool, one on its queue thread:
        # both time out, and both threads go on running kernels.
        outcomes = {}
        def spin_then_add(threads):
            try:
                library.function("spin")(np.zeros(1, np.int32), threads=threads)
                outcome = "no error"
            except etmetal_py.EtmetalError as error:
                outcome = str(error).splitlines()[0]
            try:
                etmetal_py.synchronize()
            except etmetal_py.EtmetalError:
                pass
            after = np.zeros(1 << 16, np.float32)
            library.function("add_one")(after, threads=len(after))
            outcomes[threads] = (outcome, float(after.sum()))
        spinners = [threading.Thread(target=spin_then_add, args=(threads,)) for threads in (4096, 1)]
        for spinner in spinners:
            spinner.start()
        for spinner in spinners:
            spinner.join()
        for threads in (4096, 1):
            print(threads, *outcomes[threads], sep="|")
    """)


def test_the_watchdog_spares_short_dispatches_and_stops_two_threads_at_once():
    """Many dispatches in a row, each far shorter than the timeout, never time out (the watchdog
    tells dispatches apart, not threads); two kernels that never end, on two host threads at
    once, both time out and both threads go on."""
    require_cpu_device()
    result = subprocess.run([sys.executable, "-c", WATCHDOG_CHILD], input=FAULTS, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "short dispatches: ok", result.stdout + result.stderr[-3000:]
    for line, threads in zip(lines[1:], (4096, 1)):
        count, message, after = line.split("|")
        assert count == str(threads)
        assert "'spin': did not finish within 250 ms (ETMETAL_KERNEL_TIMEOUT_MS)" in message, line
        assert after == str(float(1 << 16)), line
    assert len(lines) == 3, result.stdout
