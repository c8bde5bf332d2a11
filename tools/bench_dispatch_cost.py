#!/usr/bin/env python3
"""CPU cost of one kernel dispatch, counted in instructions with callgrind (valgrind): a C
host encodes a 1-thread kernel with 4 tensor arguments and one int N times on the CPU device
(start_encoding, 5 set_arg calls, dispatch; the stream commits by its policy) and waits once.
Instructions per dispatch = (Ir(2N) - Ir(N)) / N, all threads counted, so process start,
compilation and the final wait cancel out and the kernel's execution on the queue thread is
included. Target: <= 3,000 instructions per dispatch.

usage: python3 tools/bench_dispatch_cost.py [--dispatches N]
"""

import argparse
import os
import re
import subprocess
import tempfile

from callgrind_host import build_host, instructions

HOST = r"""
#include <etmetal/etmetal.h>
#include <stdio.h>
#include <stdlib.h>

static const char* kSource =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void axpy(device float* out [[buffer(0)]], constant float* a [[buffer(1)]],\n"
    "                 constant float* b [[buffer(2)]], constant float* c [[buffer(3)]],\n"
    "                 constant long& n [[buffer(4)]], uint i [[thread_position_in_grid]]) {\n"
    "  if (long(i) < n) out[i] = a[i] * b[i] + c[i];\n"
    "}\n";

int main(int argc, char** argv) {
  const long count = atol(argv[1]);
  AOTIMetalShaderLibraryHandle library;
  AOTIMetalKernelFunctionHandle kernel;
  if (aoti_torch_mps_create_shader_library(kSource, &library) ||
      aoti_torch_mps_get_kernel_function(library, "axpy", &kernel)) {
    fprintf(stderr, "%s\n", etmetal_last_error());
    return 1;
  }
  int64_t sizes[1] = {16};
  AtenTensorHandle tensors[4];
  for (int t = 0; t < 4; ++t) {
    if (aoti_torch_empty_strided(1, sizes, NULL, aoti_torch_dtype_float32(),
                                 aoti_torch_device_type_mps(), 0, &tensors[t])) return 2;
  }
  for (long k = 0; k < count; ++k) {
    aoti_torch_mps_start_encoding(kernel);
    for (int t = 0; t < 4; ++t) aoti_torch_mps_set_arg_tensor(kernel, (unsigned)t, tensors[t]);
    aoti_torch_mps_set_arg_int(kernel, 4, 1);
    aoti_torch_mps_dispatch_single(kernel, 1);
  }
  if (etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT)) {
    fprintf(stderr, "%s\n", etmetal_last_error());
    return 3;
  }
  return 0;
}
"""


def per_function(profile):
    """Exclusive instructions per function of a callgrind profile."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", str(profile)],
                          capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)$", line)
        if match and "PROGRAM TOTALS" not in line:
            name = re.sub(r"\s*\[[^\]]*\]$", "", match.group(2))
            costs[name] = costs.get(name, 0) + int(match.group(1).replace(",", ""))
    return costs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dispatches", type=int, default=2000)
    parser.add_argument("--functions", type=int, default=0, metavar="K",
                        help="also list the K functions that cost the most per dispatch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etmetal-dispatch-") as folder:
        binary, _ = build_host(HOST, folder)
        env = dict(os.environ, ETMETAL_DEVICE="cpu")
        subprocess.run([str(binary), "1"], env=env, check=True)  # compile the kernel once
        n = args.dispatches
        small, small_profile = instructions(binary, [str(n)], folder, env)
        large, large_profile = instructions(binary, [str(2 * n)], folder, env)
        print(f"{(large - small) / n:.0f} instructions per dispatch (encode + run a 1-thread kernel, "
              f"4 tensors + 1 int; target <= 3000)")
        if args.functions:
            before, after = per_function(small_profile), per_function(large_profile)
            growth = {name: (after.get(name, 0) - before.get(name, 0)) / n for name in after}
            for name, cost in sorted(growth.items(), key=lambda item: -item[1])[:args.functions]:
                print(f"  {cost:8.0f}  {name[:150]}")


if __name__ == "__main__":
    main()
