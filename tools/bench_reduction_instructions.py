#!/usr/bin/env python3
"""Instructions per GPU thread of reduction kernels on the CPU device, counted with callgrind
(valgrind): a C host dispatches one kernel over a grid N times, waiting after each, with one
worker thread. Instructions per thread = (Ir(2N) - Ir(N)) / (N * threads), all threads
counted, so process start, the kernel compile and the first dispatch cancel out. The kernels
are bench_cpu_device's threadgroup-barrier tree and simd_sum reductions (the ones
bench_models.py reports in GPU threads per second) and Inductor-style c10::metal
threadgroup_sum / threadgroup_max rows; each result is checked against a sum computed here.
Kernels are compiled for x86-64-v3 (valgrind decodes no AVX-512) unless --isa says otherwise.
Stable where wall-clock rates are not (a shared, loaded machine).

usage: python3 tools/bench_reduction_instructions.py [--calls N] [--isa FLAGS] [--path PATH]
"""

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

import bench_cpu_device
from callgrind_host import build_host, instructions

HOST = r"""
#include <etmetal/etmetal.h>
#include <etmetal/aoti_shim.h>
#include <etmetal/aoti_shim_mps.h>
#include <stdio.h>
#include <stdlib.h>

static char* read_text(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) exit(2);
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc(size + 1);
  if (fread(text, 1, size, f) != (size_t)size) exit(2);
  text[size] = 0;
  fclose(f);
  return text;
}

static AtenTensorHandle tensor(int64_t count, float** data) {
  const int64_t stride = 1;
  AtenTensorHandle t;
  if (aoti_torch_empty_strided(1, &count, &stride, aoti_torch_dtype_float32(), aoti_torch_device_type_mps(), 0, &t) ||
      aoti_torch_get_data_ptr(t, (void**)data)) exit(2);
  return t;
}

static void check(AOTITorchError error) {
  if (error) {
    fprintf(stderr, "%s\n", etmetal_last_error());
    exit(3);
  }
}

/* host CALLS SOURCE KERNEL ROWS ROW_LENGTH ROWS_ON_X OPERATION(sum|max): out[r] = reduction of
 * in[r * ROW_LENGTH ...]; one threadgroup of ROW_LENGTH threads per row, the row the grid's y
 * (ROWS_ON_X 0: one dimension, groups along x) or x (ROWS_ON_X 1: grid ROWS x ROW_LENGTH). */
int main(int argc, char** argv) {
  if (argc != 8) return 1;
  const long calls = atol(argv[1]);
  const uint64_t rows = atol(argv[4]), row_length = atol(argv[5]);
  const int rows_on_x = atoi(argv[6]), maximum = argv[7][1] == 'a';
  float *in, *out;
  AtenTensorHandle input = tensor(rows * row_length, &in), output = tensor(rows, &out);
  unsigned seed = 1;
  for (uint64_t i = 0; i < rows * row_length; ++i) {
    seed = seed * 1103515245u + 12345u;
    in[i] = (float)((int)((seed >> 16) & 15) - 8);
  }
  AOTIMetalShaderLibraryHandle library;
  AOTIMetalKernelFunctionHandle function;
  check(aoti_torch_mps_create_shader_library(read_text(argv[2]), &library));
  check(aoti_torch_mps_get_kernel_function(library, argv[3], &function));
  for (long k = 0; k < calls; ++k) {
    check(aoti_torch_mps_start_encoding(function));
    if (rows_on_x) {
      check(aoti_torch_mps_set_arg_tensor(function, 0, output));
      check(aoti_torch_mps_set_arg_tensor(function, 1, input));
      const uint64_t length[2] = {rows, row_length}, group[2] = {1, row_length};
      check(aoti_torch_mps_dispatch_array_with_group_size(function, length, 2, group, 2));
    } else {
      check(aoti_torch_mps_set_arg_tensor(function, 0, input));
      check(aoti_torch_mps_set_arg_tensor(function, 1, output));
      check(aoti_torch_mps_dispatch_single_with_group_size(function, rows * row_length, row_length));
    }
    check(etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT));
  }
  for (uint64_t r = 0; r < rows; ++r) {
    float expected = maximum ? in[r * row_length] : 0.0f;
    for (uint64_t i = 0; i < row_length; ++i) {
      const float v = in[r * row_length + i];
      expected = maximum ? (v > expected ? v : expected) : expected + v;
    }
    if (out[r] != expected) {
      fprintf(stderr, "row %llu: %g, expected %g\n", (unsigned long long)r, out[r], expected);
      return 4;
    }
  }
  return 0;
}
"""

# An Inductor-shaped row reduction through c10::metal (xindex on x, the reduction index on y).
INDUCTOR_ROW = """
kernel void generated_kernel(device float* out_ptr0, constant float* in_ptr0,
                             uint2 thread_pos [[thread_position_in_grid]],
                             uint2 group_pos [[thread_position_in_threadgroup]]) {
  auto xindex = thread_pos.x;
  auto r0_index = thread_pos.y;
  threadgroup float tmp_acc_0[32];
  auto tmp0 = in_ptr0[r0_index + 256 * xindex];
  auto tmp1 = c10::metal::threadgroup_OPERATION(tmp_acc_0, tmp0, r0_index, 256);
  if (r0_index == 0) out_ptr0[xindex] = tmp1;
}
"""

# name: (source, kernel, rows on x, operation)
KERNELS = {
    "barrier tree reduction": (bench_cpu_device.TREE_REDUCTION, "tree_sum", 0, "sum"),
    "simd_sum reduction": (bench_cpu_device.SIMD_REDUCTION, "simd_group_sum", 0, "sum"),
    "c10 threadgroup_sum rows": (None, "generated_kernel", 1, "sum"),
    "c10 threadgroup_max rows": (None, "generated_kernel", 1, "max"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2, help="N (default 2)")
    parser.add_argument("--rows", type=int, default=256, help="threadgroups of 256 threads (default 256)")
    parser.add_argument("--isa", default="-march=x86-64-v3", help="kernel ISA flags (default -march=x86-64-v3)")
    parser.add_argument("--path", choices=("regions", "fibers"), help="force an execution path")
    parser.add_argument("--only", nargs="+", choices=list(KERNELS), metavar="NAME")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etmetal-reductions-") as folder:
        env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CPU_THREADS="1", ETMETAL_CPU_ISA="portable",
                   ETMETAL_CXXFLAGS=args.isa, ETMETAL_CACHE_DIR=os.environ.get("ETMETAL_CACHE_DIR",
                                                                               str(Path(folder) / "cache")))
        if args.path:
            env["ETMETAL_CPU_EXECUTION"] = args.path
        binary, library = build_host(HOST, folder)
        os.chdir(folder)  # the source's name is part of the profile's file name
        c10 = None
        threads = args.rows * 256
        print(f"library {library}; kernels {args.isa}; 1 worker; {threads} threads; instructions per GPU thread")
        for name in args.only or KERNELS:
            source, kernel, rows_on_x, operation = KERNELS[name]
            if source is None:
                c10 = c10 or bench_cpu_device.embed_c10_headers(["reduction_utils"])
                source = c10 + INDUCTOR_ROW.replace("OPERATION", operation)
            (Path(folder) / "kernel.metal").write_text(source)
            arguments = ["kernel.metal", kernel, str(args.rows), "256", str(rows_on_x), operation]
            subprocess.run([str(binary), "1", *arguments], env=env, check=True)  # compile once
            small, _ = instructions(binary, [str(args.calls), *arguments], folder, env)
            large, _ = instructions(binary, [str(2 * args.calls), *arguments], folder, env)
            print(f"  {name:28} {(large - small) / args.calls / threads:8.2f}", flush=True)


if __name__ == "__main__":
    main()
