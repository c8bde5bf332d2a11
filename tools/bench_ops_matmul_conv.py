#!/usr/bin/env python3
"""Benchmark of the mm and convolution fallbacks (shaders/matmul.metal, shaders/convolution.metal)
on the active device (ETMETAL_DEVICE; on Linux the CPU device), against torch eager CPU in the
same run.

For each problem: the kernel that native/ops chooses, the median time of warm runs (each run
encodes the op and waits for the stream), GFLOP/s of etmetal and of torch eager on the same
inputs, and their ratio; then the median ratio per op. Then, per problem, the device-memory
traffic of the chosen kernel against the minimum the op needs (each input read once, the output
written once). The kernel traffic is counted from the kernel's access pattern (every load and
store a thread issues to device memory, before any cache), not measured: the CPU device has no
memory counters.

usage: python3 tools/bench_ops_matmul_conv.py [--repeats R] [--quick] [--mm-only]
"""

import argparse
import math
import os
import statistics
import time

import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib

# Kernel choice and tile geometry of native/ops/matmul.cpp (kept in step with it).
TILED_MINIMUM = 16
LARGE_TILE_MINIMUM = 64
WIDE_TILE_MINIMUM = 128
ROW_DOT_MINIMUM_DEPTH = 64
GEMV_DOT_COLUMNS = 4
GEMV_STRIP_COLUMNS = 32
PANEL_ROWS, PANEL_COLUMNS, PANEL_THREADS = 8, 32, 16  # matmul_panels: the CPU launch shape


def matmul_kernel(M, K, N, a_strides, b_strides, cpu_device, cpu_shape):
    """(kernel, block rows, block columns) for out[M, N] = a[M, K] @ b[K, N] with the given
    (row, depth) and (depth, column) strides, on the CPU device or not, with the CPU launch shape
    (ETMETAL_OP_SHAPES=cpu, the CPU device's default) or not."""
    if cpu_shape and K > 0 and min(M, N) >= TILED_MINIMUM:
        if N < PANEL_COLUMNS:  # the host runs the transposed product
            M, N = N, M
        if M >= PANEL_ROWS and N >= PANEL_COLUMNS:
            return "panels", PANEL_ROWS * PANEL_THREADS, PANEL_COLUMNS
    if K >= TILED_MINIMUM and min(M, N) >= LARGE_TILE_MINIMUM and max(M, N) >= WIDE_TILE_MINIMUM:
        block_m = 128 if M >= WIDE_TILE_MINIMUM else 64
        return f"tiled{block_m}x{128 * 64 // block_m}", block_m, 128 * 64 // block_m
    if M >= TILED_MINIMUM and N >= TILED_MINIMUM and K >= TILED_MINIMUM:
        block = 64 if M >= LARGE_TILE_MINIMUM and N >= LARGE_TILE_MINIMUM else 32
        return f"tiled{block}", block, block
    if cpu_device and K > 0 and min(M, N) < TILED_MINIMUM:
        if N < M:  # the host runs the transposed product
            M, N, a_strides, b_strides = N, M, b_strides[::-1], a_strides[::-1]
        if a_strides[1] == 1 and b_strides[0] == 1:
            return "gemv_kdot", M, N
        if b_strides[1] == 1 and N >= GEMV_STRIP_COLUMNS:
            return "gemv_columns", M, N
    if M == 1 and K >= ROW_DOT_MINIMUM_DEPTH and 1 in b_strides:
        return ("vector_kdot" if b_strides[0] == 1 else "vector_columns"), None, None
    if N == 1 and K >= ROW_DOT_MINIMUM_DEPTH and a_strides[1] == 1 and b_strides[0] == 1:
        return "rowdot", None, None
    return "naive", None, None


def matmul_traffic(M, K, N, kernel, block_m, block_n, itemsize):
    """(kernel bytes, minimum bytes) of out[M, N] = a[M, K] @ b[K, N], counted before any cache."""
    minimum = (M * K + K * N + M * N) * itemsize
    if kernel.startswith("tiled") or kernel == "panels":
        # Each threadgroup stages its rows of a and columns of b once per K step.
        reads = M * K * math.ceil(N / block_n) + K * N * math.ceil(M / block_m)
    elif kernel.startswith("gemv"):
        # block_m x block_n is the (possibly transposed) product the kernel runs: a thread reads
        # its strip of the wide operand for its row, and its row of the narrow one once per strip.
        rows, columns = block_m, block_n
        strip = GEMV_DOT_COLUMNS if kernel == "gemv_kdot" else GEMV_STRIP_COLUMNS
        reads = rows * K * math.ceil(columns / strip) + rows * K * columns
    else:
        # Every output element reads its whole row of a and column of b.
        reads = 2 * M * N * K
    return (reads + M * N) * itemsize, minimum


def valid_taps(input_size, output_size, kernel, stride, padding, dilation):
    """Sum over output positions of the kernel taps that land inside the input (forward)."""
    total = 0
    for o in range(output_size):
        for k in range(kernel):
            i = o * stride - padding + k * dilation
            total += 0 <= i < input_size
    return total


# Kernel choice of native/ops/convolution.cpp for forward problems.
GEMM_BLOCK = 32
GEMM_MINIMUM_PIXELS = 32
GEMM_MINIMUM_CHANNELS = 16
GEMM_MINIMUM_DEPTH = 16


def conv_kernel(input, weight, output, groups):
    pixels = output.numel() // output.shape[1]
    depth = (input.shape[1] // groups) * math.prod(weight.shape[2:])
    gemm = (pixels >= GEMM_MINIMUM_PIXELS and weight.shape[0] // groups >= GEMM_MINIMUM_CHANNELS
            and depth >= GEMM_MINIMUM_DEPTH)
    return "gemm" if gemm else "direct"


def conv_traffic(input, weight, output, stride, padding, dilation, groups, kernel, itemsize):
    """(kernel bytes, minimum bytes). Direct: every output element reads, for each input
    channel of its group, the input and weight values of each tap inside the input. Implicit
    GEMM: each 32-pixel x 32-channel threadgroup reads its pixels' in-range patch values and
    its channels' weights once."""
    n, c_in = input.shape[:2]
    c_out = weight.shape[0]
    c_in_group, c_out_group = c_in // groups, c_out // groups
    taps = 1
    for d in range(input.dim() - 2):
        taps *= valid_taps(input.shape[2 + d], output.shape[2 + d], weight.shape[2 + d], stride[d],
                           padding[d], dilation[d])
    if kernel == "gemm":
        pixels = output.numel() // c_out
        patch_reads = groups * n * c_in_group * taps * math.ceil(c_out_group / GEMM_BLOCK)
        weight_reads = weight.numel() * math.ceil(pixels / GEMM_BLOCK)
        reads = patch_reads + weight_reads
    else:
        reads = 2 * n * c_out * c_in_group * taps
    # Plus one bias read and one store per output element.
    kernel_bytes = (reads + 2 * output.numel()) * itemsize
    minimum = (input.numel() + weight.numel() + c_out + output.numel()) * itemsize
    return kernel_bytes, minimum


def median_seconds(run_etmetal, run_torch, repeats, budget=1.0):
    """Median seconds of each, timed alternately so that both see the same machine load."""
    run_etmetal()  # warm: kernel compile, caches, thread pools
    run_torch()
    etmetal_times, torch_times = [], []
    deadline = time.perf_counter() + budget
    while len(etmetal_times) < repeats or (time.perf_counter() < deadline and len(etmetal_times) < 50):
        for run, times in ((run_etmetal, etmetal_times), (run_torch, torch_times)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return statistics.median(etmetal_times), statistics.median(torch_times)


def bench_mm(M, K, N, dtype, transposed_weight, repeats):
    a = torch.randn(M, K).to(dtype)
    b = torch.randn(N, K).to(dtype).t() if transposed_weight else torch.randn(K, N).to(dtype)
    device_a = Tensor.from_array(a)
    if transposed_weight:
        # from_array may copy into a contiguous tensor: the view over the weight is rebuilt.
        device_weight = Tensor.from_array(b.t())
        view = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch__reinterpret_tensor(device_weight.handle, 2, ffi.new("int64_t[]", [K, N]),
                                                            ffi.new("int64_t[]", [1, K]), 0, view))
        device_b = Tensor(view[0])
    else:
        device_b = Tensor.from_array(b)
    out = Tensor.empty((M, N), dtype)

    def run_etmetal():
        etmetal_py.check(lib.aoti_torch_mps_mm_out(out.handle, device_a.handle, device_b.handle))
        etmetal_py.synchronize()

    etmetal_seconds, torch_seconds = median_seconds(run_etmetal, lambda: torch.mm(a, b), repeats)
    expected = a.double() @ b.double()
    error = (out.torch().double() - expected).abs().max().item() / max(1.0, math.sqrt(K))
    cpu_device = etmetal_py.device_kind() == "cpu"
    cpu_shape = os.environ.get("ETMETAL_OP_SHAPES", "cpu" if cpu_device else "gpu") == "cpu"
    kernel, block_m, block_n = matmul_kernel(M, K, N, a.stride(), b.stride(), cpu_device, cpu_shape)
    kernel_bytes, minimum = matmul_traffic(M, K, N, kernel, block_m, block_n, a.element_size())
    flops = 2 * M * N * K
    return dict(op="mm", problem=f"{M}x{K} @ {K}x{N}{' (b = w.t())' if transposed_weight else ''}",
                dtype=str(dtype).replace("torch.", ""), kernel=kernel,
                etmetal=flops / etmetal_seconds / 1e9, torch=flops / torch_seconds / 1e9,
                milliseconds=etmetal_seconds * 1e3, bytes=kernel_bytes, minimum=minimum, error=error)


def int_array(values):
    return ffi.new("int64_t[]", list(values)), len(values)


def bench_conv(input_shape, weight_shape, stride, padding, dilation, groups, dtype, repeats):
    input = torch.randn(input_shape).to(dtype)
    weight = torch.randn(weight_shape).to(dtype)
    bias = torch.randn(weight_shape[0]).to(dtype)
    device_input, device_weight, device_bias = (Tensor.from_array(x) for x in (input, weight, bias))
    bias_handle = ffi.new("AtenTensorHandle*", device_bias.handle)
    zeros = [0] * (input.dim() - 2)
    ret = ffi.new("AtenTensorHandle*")
    results = []

    def run_etmetal():
        etmetal_py.check(lib.aoti_torch_mps_convolution(
            device_input.handle, device_weight.handle, bias_handle, *int_array(stride), *int_array(padding),
            *int_array(dilation), 0, *int_array(zeros), groups, ret))
        results[:] = [Tensor(ret[0])]
        etmetal_py.synchronize()

    def run_torch():
        return torch.ops.aten.convolution(input, weight, bias, stride, padding, dilation, False, zeros, groups)

    etmetal_seconds, torch_seconds = median_seconds(run_etmetal, run_torch, repeats)
    expected = torch.ops.aten.convolution(input.double(), weight.double(), bias.double(), stride, padding,
                                          dilation, False, zeros, groups)
    reduction = (input_shape[1] // groups) * math.prod(weight_shape[2:])
    error = (results[0].torch().double() - expected).abs().max().item() / max(1.0, math.sqrt(reduction))
    flops = 2 * expected.numel() * reduction
    kernel = conv_kernel(input, weight, expected, groups)
    kernel_bytes, minimum = conv_traffic(input, weight, expected, stride, padding, dilation, groups, kernel,
                                         input.element_size())
    problem = f"{'x'.join(map(str, input_shape))} * {'x'.join(map(str, weight_shape))} s{stride} p{padding}"
    if groups > 1:
        problem += f" g{groups}"
    return dict(op="conv", problem=problem, dtype=str(dtype).replace("torch.", ""), kernel=kernel,
                etmetal=flops / etmetal_seconds / 1e9, torch=flops / torch_seconds / 1e9,
                milliseconds=etmetal_seconds * 1e3, bytes=kernel_bytes, minimum=minimum, error=error)


MM_PROBLEMS = [  # (M, K, N, dtype, weight passed transposed)
    (64, 64, 64, torch.float32, False),
    (128, 256, 128, torch.float32, False),
    (256, 256, 256, torch.float32, False),
    (256, 256, 256, torch.float16, False),
    (256, 256, 256, torch.bfloat16, False),
    (256, 576, 64, torch.float32, False),
    (256, 576, 64, torch.float16, False),
    (256, 576, 64, torch.bfloat16, False),
    (256, 576, 64, torch.float32, True),
    (1024, 1024, 1024, torch.float32, False),
    (1, 2048, 1024, torch.float32, True),
    (1, 1024, 2048, torch.float32, False),
    (8, 512, 512, torch.float32, True),
    (4, 4096, 1024, torch.bfloat16, True),
    (1, 2048, 2048, torch.float16, False),
    (33, 100, 7, torch.float32, False),
]
MM_QUICK = [MM_PROBLEMS[0], MM_PROBLEMS[5], MM_PROBLEMS[7]]

CONV_PROBLEMS = [  # (input, weight, stride, padding, dilation, groups, dtype)
    ((1, 16, 32, 32), (32, 16, 3, 3), [1, 1], [1, 1], [1, 1], 1, torch.float32),
    ((1, 32, 32, 32), (32, 1, 3, 3), [1, 1], [1, 1], [1, 1], 32, torch.float32),
    ((1, 64, 16, 16), (64, 64, 1, 1), [1, 1], [0, 0], [1, 1], 1, torch.float32),
    ((1, 16, 32, 32), (32, 16, 3, 3), [2, 2], [1, 1], [1, 1], 1, torch.float16),
    ((1, 8, 256), (16, 8, 5), [1], [2], [1], 1, torch.float32),
    ((1, 4, 8, 16, 16), (8, 4, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 1, torch.float32),
]
CONV_QUICK = [CONV_PROBLEMS[0], CONV_PROBLEMS[1]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="at least this many timed runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="a few small problems only")
    parser.add_argument("--mm-only", action="store_true", help="the mm problems only")
    args = parser.parse_args()

    print(f"device: {etmetal_py.device_name()} ({etmetal_py.device_kind()}); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = [bench_mm(*p, args.repeats) for p in (MM_QUICK if args.quick else MM_PROBLEMS)]
    if not args.mm_only:
        rows += [bench_conv(*p, args.repeats) for p in (CONV_QUICK if args.quick else CONV_PROBLEMS)]

    print("\nthroughput (GFLOP/s; ratio = etmetal / torch eager CPU; error = max |diff| / sqrt(K))")
    header = f"{'op':5} {'problem':40} {'dtype':9} {'kernel':14} {'ms':>9} {'etmetal':>9} {'torch':>9} {'ratio':>8} {'error':>8}"
    print(header)
    for r in rows:
        print(f"{r['op']:5} {r['problem']:40} {r['dtype']:9} {r['kernel']:14} {r['milliseconds']:9.2f} "
              f"{r['etmetal']:9.3f} {r['torch']:9.2f} {r['etmetal'] / r['torch']:8.4f} {r['error']:8.1e}")
    for op in ("mm", "conv"):
        ratios = [r["etmetal"] / r["torch"] for r in rows if r["op"] == op]
        if ratios:
            print(f"median ratio {op}: {statistics.median(ratios):.4f} over {len(ratios)} problems")

    print("\ndevice-memory traffic per kernel (counted from the access pattern) vs the op's minimum")
    print(f"{'op':5} {'problem':40} {'dtype':9} {'kernel':14} {'kernel MB':>10} {'minimum MB':>11} {'ratio':>8}")
    for r in rows:
        print(f"{r['op']:5} {r['problem']:40} {r['dtype']:9} {r['kernel']:14} {r['bytes'] / 1e6:10.3f} "
              f"{r['minimum'] / 1e6:11.3f} {r['bytes'] / r['minimum']:8.1f}")


if __name__ == "__main__":
    main()
