#!/usr/bin/env python3
"""Instructions per forward convolution call on the CPU device, counted with callgrind
(valgrind): a C host runs aoti_torch_mps_convolution on one image N times, waiting after each
call, with one worker thread. Instructions per call = (Ir(2N) - Ir(N)) / N, all threads counted,
so process start, the kernel compile and the first call cancel out. Kernels are compiled for
x86-64-v3 (valgrind decodes no AVX-512) unless --isa says otherwise. The problems are the
UNet-like and resnet18-like layers of tools/bench_models.py, and their launch shape is the device's (ETMETAL_OP_SHAPES forces one).
Stable where wall-clock ratios are not (a shared, loaded machine).

usage: python3 tools/bench_conv_instructions.py [--calls N] [--isa FLAGS] [--only NAME ...]
"""

import argparse
import os
import subprocess
import tempfile

from callgrind_host import build_host, instructions

HOST = r"""
#include <etmetal/etmetal.h>
#include <etmetal/aoti_shim.h>
#include <etmetal/fallback_convolution.h>
#include <stdio.h>
#include <stdlib.h>

/* A contiguous float32 device tensor of pseudo-random values in [-0.5, 0.5). */
static AtenTensorHandle random_tensor(int64_t dims, const int64_t* sizes, unsigned seed) {
  int64_t strides[4], count = 1;
  for (int64_t d = dims - 1; d >= 0; --d) { strides[d] = count; count *= sizes[d]; }
  AtenTensorHandle tensor;
  void* data;
  if (aoti_torch_empty_strided(dims, sizes, strides, aoti_torch_dtype_float32(), aoti_torch_device_type_mps(), 0,
                               &tensor) || aoti_torch_get_data_ptr(tensor, &data)) exit(2);
  for (int64_t i = 0; i < count; ++i) {
    seed = seed * 1103515245u + 12345u;
    ((float*)data)[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return tensor;
}

/* host CALLS C_IN SIZE C_OUT KERNEL STRIDE PADDING */
int main(int argc, char** argv) {
  if (argc != 8) return 1;
  const long calls = atol(argv[1]);
  const int64_t c_in = atol(argv[2]), size = atol(argv[3]), c_out = atol(argv[4]), kernel = atol(argv[5]);
  const int64_t stride[2] = {atol(argv[6]), atol(argv[6])}, padding[2] = {atol(argv[7]), atol(argv[7])};
  const int64_t dilation[2] = {1, 1}, output_padding[2] = {0, 0};
  const int64_t input_sizes[4] = {1, c_in, size, size}, weight_sizes[4] = {c_out, c_in, kernel, kernel};
  AtenTensorHandle input = random_tensor(4, input_sizes, 1), weight = random_tensor(4, weight_sizes, 2);
  AtenTensorHandle bias = random_tensor(1, &c_out, 3);
  for (long k = 0; k < calls; ++k) {
    AtenTensorHandle output;
    if (aoti_torch_mps_convolution(input, weight, &bias, stride, 2, padding, 2, dilation, 2, 0, output_padding, 2,
                                   1, &output) || etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT)) {
      fprintf(stderr, "%s\n", etmetal_last_error());
      return 3;
    }
    aoti_torch_delete_tensor_object(output);
  }
  return 0;
}
"""

# name: (C_in, size, C_out, kernel, stride, padding)
PROBLEMS = {
    "unet enc1a 3->16 3x3 64x64": (3, 64, 16, 3, 1, 1),
    "unet enc1b 16->16 3x3 64x64": (16, 64, 16, 3, 1, 1),
    "unet dec1a 32->16 3x3 64x64": (32, 64, 16, 3, 1, 1),
    "unet enc2b 32->32 3x3 32x32": (32, 32, 32, 3, 1, 1),
    "unet midb 64->64 3x3 16x16": (64, 16, 64, 3, 1, 1),
    "unet out 16->3 1x1 64x64": (16, 64, 3, 1, 1, 0),
    "resnet stem 3->64 7x7 s2 64x64": (3, 64, 64, 7, 2, 3),
    "resnet layer1 64->64 3x3 16x16": (64, 16, 64, 3, 1, 1),
    "resnet layer2 128->128 3x3 8x8": (128, 8, 128, 3, 1, 1),
    "resnet layer3 128->256 3x3 s2 8x8": (128, 8, 256, 3, 2, 1),
    "resnet layer3 256->256 3x3 4x4": (256, 4, 256, 3, 1, 1),
    "resnet layer3 down 128->256 1x1 s2": (128, 8, 256, 1, 2, 0),
    "resnet layer4 512->512 3x3 2x2": (512, 2, 512, 3, 1, 1),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4, help="N (default 4)")
    parser.add_argument("--isa", default="-march=x86-64-v3", help="kernel ISA flags (default -march=x86-64-v3)")
    parser.add_argument("--only", nargs="+", choices=list(PROBLEMS), metavar="NAME")
    args = parser.parse_args()
    env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CPU_THREADS="1", ETMETAL_CPU_ISA="portable",
               ETMETAL_CXXFLAGS=args.isa)
    with tempfile.TemporaryDirectory(prefix="etmetal-conv-") as folder:
        binary, library = build_host(HOST, folder)
        print(f"library {library}; kernels {args.isa}; 1 worker; instructions per call")
        for name in args.only or PROBLEMS:
            problem = PROBLEMS[name]
            subprocess.run([str(binary), "1", *map(str, problem)], env=env, check=True)  # compile once
            small, _ = instructions(binary, [str(args.calls), *map(str, problem)], folder, env)
            large, _ = instructions(binary, [str(2 * args.calls), *map(str, problem)], folder, env)
            print(f"  {name:34} {(large - small) / args.calls / 1e6:8.2f} M", flush=True)


if __name__ == "__main__":
    main()
