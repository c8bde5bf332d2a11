#!/usr/bin/env python3
"""Benchmarks of the CPU device (software Metal), through the public C ABI:

  elementwise   out = a + b over N floats, etmetal vs numpy on the same arrays (median)
  fibers        threadgroup tree reduction (256 threads, 9 barriers each) and a SIMD-group
                reduction (both run as barrier regions): GPU threads per second, per worker
                thread, and per second of the process's CPU time (which counts only the time
                the process ran: on a shared host, far steadier than the wall time)
  compile       a ~155 KB library (c10/metal special_math + reduction_utils + random, as
                Inductor embeds them, and one reduction kernel): cold build, warm creation
                in this process and in a fresh process

The kernel cache is a fresh temporary folder unless --cache-dir is given, so the compile
figures are cold. Targets: elementwise within 1.5x of numpy, >= 20 M fiber threads/s per
worker, warm creation < 5 ms.

usage: python3 tools/bench_cpu_device.py [--size N] [--repeats R] [--cache-dir DIR]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ELEMENTWISE = """
#include <metal_stdlib>
using namespace metal;
kernel void generated_kernel(device float* out_ptr0, constant float* in_ptr0,
                             constant float* in_ptr1, uint xindex [[thread_position_in_grid]]) {
  out_ptr0[xindex] = in_ptr0[xindex] + in_ptr1[xindex];
}
"""

TREE_REDUCTION = """
#include <metal_stdlib>
using namespace metal;
kernel void tree_sum(device const float* in [[buffer(0)]], device float* sums [[buffer(1)]],
                     uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                     uint group [[threadgroup_position_in_grid]]) {
  threadgroup float partial[256];
  partial[lid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = 128; stride > 0; stride /= 2) {
    if (lid < stride) partial[lid] += partial[lid + stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lid == 0) sums[group] = partial[0];
}
"""

SIMD_REDUCTION = """
#include <metal_stdlib>
using namespace metal;
kernel void simd_group_sum(device const float* in [[buffer(0)]], device float* sums [[buffer(1)]],
                           uint gid [[thread_position_in_grid]],
                           uint lane [[thread_index_in_simdgroup]],
                           uint simdgroup [[simdgroup_index_in_threadgroup]],
                           uint group [[threadgroup_position_in_grid]]) {
  threadgroup float partial[8];
  const float s = simd_sum(in[gid]);
  if (lane == 0) partial[simdgroup] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simdgroup == 0) {
    const float t = simd_sum(lane < 8 ? partial[lane] : 0.0f);
    if (lane == 0) sums[group] = t;
  }
}
"""

LARGE_KERNEL = """
kernel void generated_kernel(device float* out_ptr0, constant float* in_ptr0,
                             uint2 thread_pos [[thread_position_in_grid]],
                             uint2 group_pos [[thread_position_in_threadgroup]]) {
  auto xindex = thread_pos.x;
  auto r0_index = thread_pos.y;
  threadgroup float tmp_acc_0[32];
  auto tmp0 = in_ptr0[r0_index + 128 * xindex];
  auto tmp1 = c10::metal::digamma(tmp0) + c10::metal::erfinv(tmp0 * 0.5f);
  auto tmp2 = c10::metal::threadgroup_sum(tmp_acc_0, tmp1, r0_index, 128);
  if (r0_index == 0) out_ptr0[xindex] = tmp2;
}
"""


def embed_c10_headers(names):
    """The c10/metal headers pasted in include order, each once (what Inductor embeds)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")  # the wheel's headers; torch itself is not imported
    if spec is None or spec.origin is None:
        sys.exit("the large-library benchmark reads c10/metal headers from an installed torch")
    base = Path(spec.origin).parent / "include"
    seen, out = set(), []

    def paste(relative):
        if relative in seen:
            return
        seen.add(relative)
        for line in (base / relative).read_text().splitlines():
            match = re.match(r'\s*#include\s*<(c10/metal/[\w.]+)>', line)
            if match:
                paste(match.group(1))
            elif line.strip() != "#pragma once":
                out.append(line)

    for name in names:
        paste(f"c10/metal/{name}.h")
    return "\n".join(out) + "\n"


def median_seconds(function, repeats):
    return median_wall_and_cpu_seconds(function, repeats)[0]


def median_wall_and_cpu_seconds(function, repeats):
    """Medians of the wall time and of this process's CPU time (all its threads). On a shared
    machine the wall time also counts the waits for a core, the CPU time does not, so the two
    together tell a slower kernel from a busier host."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu_start)
    return statistics.median(walls), statistics.median(cpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 24, help="elements (default 16M)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--cache-dir", help="kernel cache (default: a fresh temporary folder)")
    args = parser.parse_args()

    temporary = None
    if args.cache_dir:
        os.environ["ETMETAL_CACHE_DIR"] = args.cache_dir
    else:
        temporary = tempfile.TemporaryDirectory(prefix="etmetal-bench-")
        os.environ["ETMETAL_CACHE_DIR"] = temporary.name
        # A cache named by ETMETAL_CACHE_DIR gets portable objects unless told otherwise; this
        # one is this machine's alone, so measure the host-ISA build users get by default.
        os.environ.setdefault("ETMETAL_CPU_ISA", "native")
    os.environ.setdefault("ETMETAL_DEVICE", "cpu")
    sys.path.insert(0, str(ROOT))
    import numpy as np

    import etmetal_py
    from etmetal_py import ffi, lib
    from etmetal_py.tensors import Tensor

    if etmetal_py.device_kind() != "cpu":
        sys.exit(f"the active device is {etmetal_py.device_kind()!r}, not the CPU device")
    workers = int(os.environ.get("ETMETAL_CPU_THREADS", "0")) or os.cpu_count()

    def create(source, name):
        library = ffi.new("AOTIMetalShaderLibraryHandle*")
        etmetal_py.check(lib.aoti_torch_mps_create_shader_library(source.encode(), library))
        function = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], name.encode(), function))
        return library[0], function[0]

    def dispatch(function, tensors, length, group=None):
        etmetal_py.check(lib.aoti_torch_mps_start_encoding(function))
        for index, tensor in enumerate(tensors):
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function, index, tensor.handle))
        if group is None:
            etmetal_py.check(lib.aoti_torch_mps_dispatch_single(function, length))
        else:
            etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(function, length, group))
        etmetal_py.synchronize()

    print(f"CPU device: {etmetal_py.device_name()}, {workers} worker threads, "
          f"cache {os.environ['ETMETAL_CACHE_DIR']}, ISA {os.environ.get('ETMETAL_CPU_ISA') or 'portable'}")

    # -- elementwise ------------------------------------------------------------------
    n = args.size
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = np.empty_like(a)
    ta, tb, tout = Tensor.from_array(a), Tensor.from_array(b), Tensor.from_array(out)
    _, add = create(ELEMENTWISE, "generated_kernel")
    dispatch(add, [tout, ta, tb], n)
    assert np.array_equal(tout.numpy(), a + b), "elementwise result is wrong"
    ours = median_seconds(lambda: dispatch(add, [tout, ta, tb], n), args.repeats)
    theirs = median_seconds(lambda: np.add(a, b, out=out), args.repeats)
    print(f"elementwise add, {n} floats: etmetal {ours * 1e3:.2f} ms, numpy {theirs * 1e3:.2f} ms, "
          f"ratio {ours / theirs:.2f}x (target <= 1.5x), {3 * 4 * n / ours / 1e9:.1f} GB/s")

    # -- fibers -----------------------------------------------------------------------
    m = min(n, 1 << 22) // 256 * 256
    data = rng.integers(-8, 8, m).astype(np.float32)
    tdata = Tensor.from_array(data)
    expected = data.reshape(-1, 256).sum(axis=1)
    for label, source, name in (("threadgroup tree reduction", TREE_REDUCTION, "tree_sum"),
                                ("simd_sum reduction", SIMD_REDUCTION, "simd_group_sum")):
        sums = Tensor.empty([m // 256])
        _, function = create(source, name)
        dispatch(function, [tdata, sums], m, 256)
        assert np.array_equal(sums.numpy(), expected), f"{label} result is wrong"
        seconds, cpu_seconds = median_wall_and_cpu_seconds(lambda: dispatch(function, [tdata, sums], m, 256),
                                                           max(3, args.repeats // 3))
        rate = m / seconds / 1e6
        print(f"fiber path, {label}: {rate:.1f} M GPU threads/s, {rate / workers:.1f} M per worker, "
              f"{m / cpu_seconds / 1e6:.1f} M per CPU second (target >= 20 M per worker)")

    # -- compile ----------------------------------------------------------------------
    source = embed_c10_headers(["special_math", "reduction_utils", "random"]) + LARGE_KERNEL
    start = time.perf_counter()
    create(source, "generated_kernel")
    cold = time.perf_counter() - start
    warm = median_seconds(lambda: create(source, "generated_kernel"), 20)
    script = ("import sys, time; sys.path.insert(0, sys.argv[2]); import etmetal_py; "
              "from etmetal_py import ffi, lib; source = open(sys.argv[1]).read().encode(); "
              "h = ffi.new('AOTIMetalShaderLibraryHandle*'); f = ffi.new('AOTIMetalKernelFunctionHandle*'); "
              "t = time.perf_counter(); etmetal_py.check(lib.aoti_torch_mps_create_shader_library(source, h)); "
              "etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(h[0], b'generated_kernel', f)); "
              "print(time.perf_counter() - t)")
    with tempfile.NamedTemporaryFile("w", suffix=".metal", delete=False) as f:
        f.write(source)
    try:
        fresh = float(subprocess.run([sys.executable, "-c", script, f.name, str(ROOT)], check=True,
                                     capture_output=True, text=True, env=os.environ).stdout.split()[-1])
    finally:
        os.unlink(f.name)
    print(f"library of {len(source) / 1024:.0f} KB: cold build {cold:.2f} s, warm creation "
          f"{warm * 1e3:.2f} ms in-process, {fresh * 1e3:.2f} ms in a fresh process (target < 5 ms)")
    if temporary:
        temporary.cleanup()


if __name__ == "__main__":
    main()
