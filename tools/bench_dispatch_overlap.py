#!/usr/bin/env python3
"""Overlapping dispatches on the CPU device (ETMETAL_CPU_OVERLAP) on a decode-like step: per
layer a norm, three matrix-vector products reading the normed vector (q, k, v: independent),
a combine, a projection and a residual add, then two more independent products (gate, up), an
activation, a projection and a residual add: 11 small dispatches (each runs on one thread),
`--layers` layers per step, encoded and waited for as a model's step is. Fresh processes with
ETMETAL_CPU_THREADS=2 (by default) and ETMETAL_CPU_OVERLAP=1 and =0 alternate for several
rounds; each reports the median wall time of one step, the process CPU time per step (what
overlapping costs in work: waking workers) and a checksum of its result (which must match
between the settings). Figures are medians over rounds; speedup = time without overlap / time
with it. The load average is printed beside them: on a machine with fewer idle cores than
threads the speedup says little.

usage: python3 tools/bench_dispatch_overlap.py [--rounds R] [--steps N] [--layers L] [--hidden H]
                                               [--threads T]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = """
#include <metal_stdlib>
using namespace metal;
kernel void scale_by_norm(device float* out [[buffer(0)]], const device float* x [[buffer(1)]],
                          constant long& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  float sum = 0.0f;
  for (long k = 0; k < n; ++k) sum += x[k] * x[k];
  out[i] = x[i] * rsqrt(sum / float(n) + 1e-6f);
}
kernel void matvec(device float* out [[buffer(0)]], const device float* w [[buffer(1)]],
                   const device float* x [[buffer(2)]], constant long& n [[buffer(3)]],
                   uint row [[thread_position_in_grid]]) {
  float sum = 0.0f;
  for (long k = 0; k < n; ++k) sum += w[row * n + k] * x[k];
  out[row] = sum;
}
kernel void combine(device float* out [[buffer(0)]], const device float* q [[buffer(1)]],
                    const device float* k [[buffer(2)]], const device float* v [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  out[i] = tanh(q[i] * k[i]) * v[i];
}
kernel void gated(device float* out [[buffer(0)]], const device float* gate [[buffer(1)]],
                  const device float* up [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  const float g = gate[i];
  out[i] = g / (1.0f + exp(-g)) * up[i];
}
kernel void add_to(device float* x [[buffer(0)]], const device float* y [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
  x[i] += y[i];
}
"""


def child(steps, layers, hidden):
    sys.path.insert(0, str(ROOT))
    import time

    import numpy as np

    import etmetal_py
    from etmetal_py import Tensor, ffi, lib

    library = ffi.new("AOTIMetalShaderLibraryHandle*")
    etmetal_py.check(lib.aoti_torch_mps_create_shader_library(KERNELS.encode(), library))

    def kernel(name):
        handle = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], name.encode(), handle))
        return handle[0]

    norm, matvec, combine, gated, add_to = (kernel(name) for name in
                                            ("scale_by_norm", "matvec", "combine", "gated", "add_to"))
    rng = np.random.default_rng(0)

    def tensor(*shape):
        return Tensor.from_array((rng.standard_normal(shape, dtype=np.float32) / np.sqrt(hidden)).astype(np.float32))

    weights = [{name: tensor(hidden, hidden) for name in ("q", "k", "v", "o", "gate", "up", "down")}
               for _ in range(layers)]
    x = Tensor.from_array(rng.standard_normal(hidden, dtype=np.float32))
    scratch = {name: Tensor.empty([hidden]) for name in
               ("normed", "q", "k", "v", "mixed", "projected", "gate", "up", "activated")}

    def dispatch(function, *arguments):
        etmetal_py.check(lib.aoti_torch_mps_start_encoding(function))
        for index, argument in enumerate(arguments):
            if isinstance(argument, int):
                etmetal_py.check(lib.aoti_torch_mps_set_arg_int(function, index, argument))
            else:
                etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function, index, argument.handle))
        etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(function, hidden, 64))

    def step():
        s = scratch
        for w in weights:
            dispatch(norm, s["normed"], x, hidden)
            for name in ("q", "k", "v"):
                dispatch(matvec, s[name], w[name], s["normed"], hidden)
            dispatch(combine, s["mixed"], s["q"], s["k"], s["v"])
            dispatch(matvec, s["projected"], w["o"], s["mixed"], hidden)
            dispatch(add_to, x, s["projected"])
            dispatch(norm, s["normed"], x, hidden)
            for name in ("gate", "up"):
                dispatch(matvec, s[name], w[name], s["normed"], hidden)
            dispatch(gated, s["activated"], s["gate"], s["up"])
            dispatch(matvec, s["projected"], w["down"], s["activated"], hidden)
            dispatch(add_to, x, s["projected"])
        etmetal_py.synchronize()

    step()  # warm-up: compiles, allocates
    times = []
    cpu_start = time.process_time()
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    cpu_ms = (time.process_time() - cpu_start) / steps * 1e3
    result = x.numpy()
    print(json.dumps({"step_ms": statistics.median(times) * 1e3, "cpu_ms": cpu_ms,
                      "checksum": float(np.float64(result).sum()), "finite": bool(np.isfinite(result).all())}))


def run(overlap, threads, args):
    env = dict(os.environ, ETMETAL_CPU_OVERLAP=overlap, ETMETAL_CPU_THREADS=str(threads),
               ETMETAL_DEVICE="cpu")
    command = [sys.executable, __file__, "--child", "--steps", str(args.steps), "--layers", str(args.layers),
               "--hidden", str(args.hidden)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        sys.exit(f"child failed (ETMETAL_CPU_OVERLAP={overlap}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.layers, args.hidden)
        return
    results = {"1": [], "0": []}
    cpu = {"1": [], "0": []}
    checksums = set()
    for _ in range(args.rounds):
        for overlap in ("1", "0"):
            result = run(overlap, args.threads, args)
            if not result["finite"]:
                sys.exit(f"non-finite result with ETMETAL_CPU_OVERLAP={overlap}")
            results[overlap].append(result["step_ms"])
            cpu[overlap].append(result["cpu_ms"])
            checksums.add(result["checksum"])
    if len(checksums) != 1:
        sys.exit(f"results differ between the settings: checksums {sorted(checksums)}")
    on, off = statistics.median(results["1"]), statistics.median(results["0"])
    dispatches = 11 * args.layers
    print(f"decode-like step: {args.layers} layers x 11 dispatches ({dispatches}), hidden {args.hidden}, "
          f"ETMETAL_CPU_THREADS={args.threads}, {args.rounds} rounds x {args.steps} steps; "
          f"load average {os.getloadavg()[0]:.1f}")
    for label, key, median in (("off", "0", off), ("on: ", "1", on)):
        print(f"  overlap {label} median {median:.3f} ms/step, best {min(results[key]):.3f}, "
              f"CPU time {statistics.median(cpu[key]):.3f} ms/step   "
              f"({', '.join(f'{t:.3f}' for t in results[key])})")
    print(f"  speedup (off / on): {off / on:.2f}x; results identical (checksum {checksums.pop():.6g})")


if __name__ == "__main__":
    main()
