"""How much slower kernels run under the sanitizer (ETMETAL_VALIDATE=1) on the CPU device.

    python3 tools/validation_overhead.py [--repeat 7]

The same kernels run in two child processes, one without and one with validation (the flag is
fixed per process); each prints the median time per dispatch after a warm-up, and the ratio of
the two medians is reported per kernel.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
from etmetal_py.kernels import compile_library

SOURCE = '''
#include <metal_stdlib>
using namespace metal;
kernel void add(device const float* a, device const float* b, device float* y, uint i [[thread_position_in_grid]]) {
  y[i] = a[i] + b[i];
}
kernel void reverse_groups(device const float* x, device float* y, uint i [[thread_position_in_grid]],
                           uint t [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) {
  threadgroup float tile[256];
  tile[t] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = tile[n - 1 - t];
}
kernel void group_sums(device const float* x, device float* sums, uint i [[thread_position_in_grid]],
                       uint t [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]],
                       uint lane [[thread_index_in_simdgroup]], uint simd [[simdgroup_index_in_threadgroup]],
                       uint simds [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  const float s = simd_sum(x[i]);
  if (lane == 0) partial[simd] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) {
    float total = 0.0f;
    for (uint k = 0; k < simds; ++k) total += partial[k];
    sums[g] = total;
  }
}
'''
repeat = int(sys.argv[1])
n = 1 << 18
x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
y = np.zeros(n, np.float32)
sums = np.zeros(n // 256, np.float32)
cases = {
    "add": lambda f: f(x, x, y, threads=n, group=256),
    "reverse_groups": lambda f: f(x, y, threadgroups=n // 256, group=256),
    "group_sums": lambda f: f(x, sums, threadgroups=n // 256, group=256),
}
out = {}
with compile_library(SOURCE) as library:
    for name, call in cases.items():
        function = library.function(name)
        call(function)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            call(function)
            times.append(time.perf_counter() - start)
        out[name] = sorted(times)[len(times) // 2]
print(json.dumps(out))
"""


def run(validate: bool, repeat: int) -> dict:
    env = dict(os.environ, ETMETAL_VALIDATE="1" if validate else "0", ETMETAL_DEVICE="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", CHILD, str(repeat)], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    plain, checked = run(False, args.repeat), run(True, args.repeat)
    print(f"{'kernel (2^18 threads)':24} {'plain ms':>10} {'validated ms':>13} {'ratio':>7}")
    for name in plain:
        print(f"{name:24} {plain[name] * 1e3:10.2f} {checked[name] * 1e3:13.2f} {checked[name] / plain[name]:7.1f}x")


if __name__ == "__main__":
    main()
