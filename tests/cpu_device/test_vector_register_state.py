"""Kernels start with the AVX registers' upper halves clear (x86-64 with AVX).

A thread whose upper halves are in use pays a state transition on every legacy-SSE instruction,
and kernels built for the portable ISA (any ETMETAL_CACHE_DIR cache) are legacy SSE calling
libm's VEX code: unet_like ran 4x slower when the runtime's threads started from a thread that
had just run torch's AVX-512 code (Linux gives a new thread a copy of its creator's registers).
The check reads the processor's record (XGETBV with ECX=1, the XINUSE bitmap: bit 2, AVX state
in use) from inside a kernel, in a fresh process whose Python thread leaves the upper halves in
use just before it encodes and dispatches."""

import os
import platform
import subprocess
import sys

import pytest

from cpu_device_testing import require_cpu_device

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# dirty_upper: sets all of ymm0 and returns without vzeroupper. avx_in_use: XINUSE bit 2, or -1
# where the processor has no AVX or does not report XINUSE (CPUID leaf 0xD sub-leaf 1, EAX bit 2).
HELPER_SOURCE = r"""
#include <cpuid.h>
static int reports_in_use(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return 0;
  if (__get_cpuid_max(0, 0) < 0xd) return 0;
  __cpuid_count(0xd, 1, a, b, c, d);
  return (a >> 2) & 1;
}
void dirty_upper(void) { if (reports_in_use()) __asm__ volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0" ::: "xmm0"); }
int avx_in_use(void) {
  unsigned lo, hi;
  if (!reports_in_use()) return -1;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (lo >> 2) & 1;
}
"""

KERNEL = r"""
#include <metal_stdlib>
using namespace metal;
kernel void avx_in_use(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    out[i] = int((lo >> 2) & 1);
}
"""

CHILD = r"""
import ctypes, sys
import numpy as np
import etmetal_py
from etmetal_py import ffi, lib
from etmetal_py.tensors import Tensor
helper = ctypes.CDLL(sys.argv[1])
helper.dirty_upper()
if helper.avx_in_use() != 1:
    print("not reported")
    sys.exit(0)
library = ffi.new("AOTIMetalShaderLibraryHandle*")
etmetal_py.check(lib.aoti_torch_mps_create_shader_library(sys.argv[2].encode(), library))
function = ffi.new("AOTIMetalKernelFunctionHandle*")
etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"avx_in_use", function))
out = Tensor.empty([64], dtype=np.int32)
helper.dirty_upper()
etmetal_py.check(lib.aoti_torch_mps_start_encoding(function[0]))
etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], 0, out.handle))
helper.dirty_upper()
etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(function[0], 64, 32))
etmetal_py.synchronize()
print("in use" if out.numpy().any() else "clear")
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 register state")
def test_kernels_start_with_clear_upper_halves(tmp_path):
    require_cpu_device()
    helper = tmp_path / "vector_state.so"
    (tmp_path / "vector_state.c").write_text(HELPER_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(tmp_path / "vector_state.c"), "-o", str(helper)],
                   check=True)
    environment = dict(os.environ, PYTHONPATH=ROOT, ETMETAL_CPU_THREADS="2")
    result = subprocess.run([sys.executable, "-c", CHILD, str(helper), KERNEL], capture_output=True,
                            text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    answer = result.stdout.strip().splitlines()[-1]
    if answer == "not reported":
        pytest.skip("the processor does not report which register state is in use (XINUSE)")
    assert answer == "clear", result.stdout
