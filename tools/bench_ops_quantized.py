"""Benchmark etmetal's quantized and custom ops on the active device (the CPU device on Linux)
against torch eager on CPU doing the same math in the same run (dequantize, then matmul; the
sequential recurrence for gated_delta_rule), and tabulate each kernel's bytes read per output
against the minimum that the packed weights impose.

    python tools/bench_ops_quantized.py [--repeats 5] [--quick]

Times are medians of `repeats` runs after one warm-up run (which also compiles the kernel);
etmetal's include encoding and a synchronize. The byte counts follow each kernel's loads as
written in shaders/*.metal (every load counted, cached or not), per output element:

- qmv (M = 1): each simdgroup reads the activation row once for its 4 rows, every weight byte
  once, and one scale + one zero per 16-value lane step.
- qmm (M > 1): a 32x64 output tile reads 32 activation rows and 64 weight rows across K, one
  scale + zero per 16-value load.
- gather_qmv: qmv per pair, plus the pair's index.
- gated_delta_rule: per state row and step, q_t and k_t (Dk each), v, g, beta; the state row is
  read and written once per sequence.

The minimum is what any kernel must read: the packed weights plus one scale / zero per group
(once for all M rows), the activations once, (for gated_delta_rule) the inputs once and the
state once.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.ops import quantize, reference


def median_seconds(function, repeats):
    function()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def etmetal_call(function, *args):
    """A callable that encodes the op on device tensors and waits for it."""
    handles = [a.handle if isinstance(a, Tensor) else a for a in args]

    def run():
        out = ffi.new("AtenTensorHandle*")
        etmetal_py.check(function(*handles, out))
        etmetal_py.synchronize()
        lib.aoti_torch_delete_tensor_object(out[0])

    return run


def dev(x):
    return Tensor.from_array(x, copy=True)


def lowbit_bytes(M, K, N, bits, group_size, itemsize):
    groups = -(-K // group_size)
    weights = K * bits / 8
    if M == 1:
        actual = weights + 2 * itemsize * -(-K // 16) + K * itemsize / 4
    else:
        actual = (weights + 2 * itemsize * -(-K // 16)) / 32 + K * itemsize / 64
    minimum = (weights + 2 * itemsize * groups) / M + K * itemsize / N
    return actual, minimum


def bench_lowbit(rows, repeats, M, K, N, bits, group_size, dtype):
    w = torch.randn(N, K)
    A = torch.randn(M, K).to(dtype)
    B, S, Z = quantize.quantize_lowbit(w, bits, group_size, dtype)
    tensors = [dev(A), dev(B), dev(S), dev(Z)]
    ours = median_seconds(etmetal_call(getattr(lib, f"aoti_torch_mps__linear_fp_act_{bits}bit_weight"),
                                       tensors[0], tensors[1], group_size, tensors[2], tensors[3]),
                          repeats)
    eager = median_seconds(lambda: reference.linear_lowbit(A, B, group_size, S, Z, bits), repeats)
    actual, minimum = lowbit_bytes(M, K, N, bits, group_size, A.element_size())
    rows.append((f"linear_{bits}bit {str(dtype)[6:]} gs{group_size}", f"{M}x{K}x{N}",
                 "qmv" if M == 1 else "qmm", ours, eager, actual, minimum))


def bench_int4pack(rows, repeats, M, K, N, group_size, dtype):
    w = torch.randn(N, K)
    A = torch.randn(M, K).to(dtype)
    mat2, sz = quantize.quantize_int4pack(w, group_size, dtype)
    tensors = [dev(A), dev(mat2), dev(sz)]
    ours = median_seconds(etmetal_call(lib.aoti_torch_mps__weight_int4pack_mm, tensors[0],
                                       tensors[1], group_size, tensors[2]), repeats)
    eager = median_seconds(lambda: reference.weight_int4pack_mm(A, mat2, group_size, sz), repeats)
    actual, minimum = lowbit_bytes(M, K, N, 4, group_size, A.element_size())
    rows.append((f"int4pack {str(dtype)[6:]} gs{group_size}", f"{M}x{K}x{N}",
                 "qmv" if M == 1 else "qmm", ours, eager, actual, minimum))


def bench_int8pack(rows, repeats, M, K, N, dtype):
    w = torch.randn(N, K)
    A = torch.randn(M, K).to(dtype)
    mat2, scales = quantize.quantize_int8pack(w, dtype)
    tensors = [dev(A), dev(mat2), dev(scales)]
    ours = median_seconds(etmetal_call(lib.aoti_torch_mps__weight_int8pack_mm, *tensors), repeats)
    eager = median_seconds(lambda: reference.weight_int8pack_mm(A, mat2, scales), repeats)
    itemsize = A.element_size()
    if M == 1:
        actual = K + itemsize * -(-K // 16) + K * itemsize / 4
    else:
        actual = (K + itemsize * -(-K // 16)) / 32 + K * itemsize / 64
    minimum = (K + itemsize) / M + K * itemsize / N
    rows.append((f"int8pack {str(dtype)[6:]}", f"{M}x{K}x{N}", "qmv" if M == 1 else "qmm",
                 ours, eager, actual, minimum))


def bench_gather(rows, repeats, P, K, N, E, group_size, dtype):
    w, s, z = quantize.quantize_experts_4bit(torch.randn(E, N, K), group_size, dtype)
    x = torch.randn(P, K).to(dtype)
    indices = torch.randint(0, E, (P,), dtype=torch.int32)
    tensors = [dev(x), dev(w), dev(s), dev(z), dev(indices)]
    ours = median_seconds(etmetal_call(lib.aoti_torch_mps_gather_qmv, *tensors, group_size), repeats)
    eager = median_seconds(lambda: reference.gather_qmv(x, w, s, z, indices, group_size), repeats)
    actual, _ = lowbit_bytes(1, K, N, 4, group_size, x.element_size())
    actual += 4 / N
    distinct = len(torch.unique(indices))
    groups = -(-K // group_size)
    minimum = distinct * (K / 2 + 2 * x.element_size() * groups) / P + K * x.element_size() / N
    rows.append((f"gather_qmv {str(dtype)[6:]} gs{group_size} E{E}", f"{P}x{K}x{N}", "qmv",
                 ours, eager, actual, minimum))


def bench_gdr(rows, repeats, B, T, Hk, Hv, Dk, Dv, dtype):
    q = torch.randn(B, T, Hk, Dk).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, Hk, Dk), dim=-1).to(dtype)
    v = torch.randn(B, T, Hv, Dv).to(dtype)
    g = torch.rand(B, T, Hv).to(dtype)
    beta = torch.rand(B, T, Hv).to(dtype)
    state = torch.zeros(B, Hv, Dv, Dk)
    tensors = [dev(t) for t in (q, k, v, g, beta, state)]
    ours = median_seconds(etmetal_call(lib.aoti_torch_mps_gated_delta_rule, *tensors), repeats)
    eager_state = state.clone()
    eager = median_seconds(lambda: reference.gated_delta_rule(q, k, v, g, beta, eager_state), repeats)
    item = q.element_size()
    # Per output y[b, t, h, dv]: one state row's step.
    actual = 2 * Dk * item + 3 * item + 2 * Dk * 4 / T
    minimum = (2 * Hk * Dk * item + Hv * (Dv + 2) * item) / (Hv * Dv) + 2 * Dk * 4 / T
    rows.append((f"gated_delta_rule {str(dtype)[6:]} Hk{Hk} Hv{Hv}", f"B{B} T{T} {Dk}x{Dv}",
                 "registers" if Dk <= 512 else "streaming", ours, eager, actual, minimum))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small shapes only")
    args = parser.parse_args()
    big = not args.quick
    K, N = (2048, 2048) if big else (512, 512)
    rows = []
    f32, bf16 = torch.float32, torch.bfloat16
    for bits in (2, 4, 6):
        bench_lowbit(rows, args.repeats, 1, K, N, bits, 64, f32)
    bench_lowbit(rows, args.repeats, 1, K, N, 4, 128, bf16)
    bench_lowbit(rows, args.repeats, 32, K, N // 4, 4, 64, f32)
    bench_int4pack(rows, args.repeats, 1, K, N, 128, f32)
    bench_int4pack(rows, args.repeats, 32, K, N // 4, 128, bf16)
    bench_int8pack(rows, args.repeats, 1, K, N, f32)
    bench_int8pack(rows, args.repeats, 32, K, N // 4, f32)
    bench_gather(rows, args.repeats, 8, K // 2, N // 2, 8, 64, f32)
    bench_gdr(rows, args.repeats, 1, 1, 4, 8, 128, 128, f32)
    bench_gdr(rows, args.repeats, 1, 64 if big else 16, 2, 4, 128, 128, bf16)

    print(f"device: {etmetal_py.device_name()}  (torch eager CPU with {torch.get_num_threads()} "
          "threads)")
    header = ("op", "shape", "kernel", "etmetal ms", "eager ms", "B/out", "min B/out", "ratio")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, shape, kernel, ours, eager, actual, minimum in rows:
        print(f"| {name} | {shape} | {kernel} | {ours * 1e3:.2f} | {eager * 1e3:.2f} | "
              f"{actual:.1f} | {minimum:.1f} | {actual / minimum:.2f} |")


if __name__ == "__main__":
    main()
