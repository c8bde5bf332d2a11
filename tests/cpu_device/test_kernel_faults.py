"""Faults at run time that a GPU survives: integer division and remainder by zero and the
signed minimum over -1 give values (AArch64's: x / 0 = 0, x % 0 = x, MIN / -1 = MIN,
MIN % -1 = 0) instead of ending the host process with SIGFPE."""

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
