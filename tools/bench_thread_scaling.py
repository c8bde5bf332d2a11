#!/usr/bin/env python3
"""How the CPU device's throughput grows with its worker threads: large dispatches (an
elementwise add over N floats, a kernel of the loop path, and mm through the matmul fallback,
which runs as barrier regions) timed in fresh processes with ETMETAL_CPU_THREADS=1 and =2,
alternately, several rounds. Each process reports the median wall time of one dispatch
(encode, commit, wait) and the process CPU time it took; the figures are medians over rounds,
speedup = wall time with 1 thread / wall time with 2 (target: >= 1.8x), and CPU cost = CPU
time with 2 threads / CPU time with 1: the work the second thread adds (spinning, waking,
false sharing), which a busy machine does not hide. The load average is printed beside them:
on a machine with fewer idle cores than threads the speedup says little.

usage: python3 tools/bench_thread_scaling.py [--rounds R] [--repeats N] [--size N] [--mm M]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ELEMENTWISE = """
#include <metal_stdlib>
using namespace metal;
kernel void add_arrays(device float* out [[buffer(0)]], constant float* a [[buffer(1)]],
                       constant float* b [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[i] = a[i] + b[i];
}
"""


def child(size, mm, repeats):
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch

    import etmetal_py
    from etmetal_py import Tensor, ffi, lib

    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(ELEMENTWISE.encode(), library))
    add = ffi.new("AOTIMetalKernelFunctionHandle*")
    etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], b"add_arrays", add))
    rng = np.random.default_rng(0)
    a = rng.standard_normal(size, dtype=np.float32)
    b = rng.standard_normal(size, dtype=np.float32)
    ta, tb, tout = Tensor.from_array(a), Tensor.from_array(b), Tensor.from_array(np.empty_like(a))

    def run_add():
        etmetal_py.check(lib.aoti_torch_mps_start_encoding(add[0]))
        for index, tensor in enumerate((tout, ta, tb)):
            etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(add[0], index, tensor.handle))
        etmetal_py.check(lib.aoti_torch_mps_dispatch_single(add[0], size))
        etmetal_py.synchronize()

    x, y = torch.randn(mm, mm), torch.randn(mm, mm)
    dx, dy, dout = Tensor.from_array(x), Tensor.from_array(y), Tensor.empty((mm, mm), torch.float32)

    def run_mm():
        etmetal_py.check(lib.aoti_torch_mps_mm_out(dout.handle, dx.handle, dy.handle))
        etmetal_py.synchronize()

    result = {}
    for name, run in (("add", run_add), ("mm", run_mm)):
        run()  # compile, warm the pool and the caches
        times, cpu_times = [], []
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            run()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
        result[name] = statistics.median(times)
        result[name + "_cpu"] = statistics.median(cpu_times)
    assert np.array_equal(tout.numpy(), a + b), "add result is wrong"
    assert torch.allclose(dout.torch(), x @ y, rtol=1e-4, atol=1e-3), "mm result is wrong"
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--size", type=int, default=1 << 24, help="floats added (default 16M)")
    parser.add_argument("--mm", type=int, default=512, help="mm of two MxM matrices (default 512)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.size, args.mm, args.repeats)
        return
    command = [sys.executable, __file__, "--child", "--size", str(args.size), "--mm", str(args.mm),
               "--repeats", str(args.repeats)]
    times = {1: [], 2: []}
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for threads in (1, 2):
            env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CPU_THREADS=str(threads))
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            times[threads].append(json.loads(out.splitlines()[-1]))
        loads.append(os.getloadavg()[0])
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    for name, label in (("add", f"add, {args.size} floats"), ("mm", f"mm {args.mm}x{args.mm}x{args.mm}")):
        one = statistics.median(t[name] for t in times[1])
        two = statistics.median(t[name] for t in times[2])
        cpu_one = statistics.median(t[name + "_cpu"] for t in times[1])
        cpu_two = statistics.median(t[name + "_cpu"] for t in times[2])
        print(f"{label}: 1 thread {one * 1e3:.1f} ms, 2 threads {two * 1e3:.1f} ms, "
              f"speedup {one / two:.2f}x (target >= 1.8x); CPU {cpu_one * 1e3:.1f} ms vs "
              f"{cpu_two * 1e3:.1f} ms, cost {cpu_two / cpu_one:.2f}x")


if __name__ == "__main__":
    main()
