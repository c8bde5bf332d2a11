#!/usr/bin/env python3
"""Benchmark of the attention fallback (aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2,
shaders/attention.metal) on the active device (ETMETAL_DEVICE; on Linux the CPU device), against
torch eager CPU in the same run.

For each problem (decode: one query row over a KV cache of 1k-4k keys; prefill: as many query
rows as keys, causal): the median time of warm runs (each run encodes the op and waits for the
stream), tokens/s of etmetal and of torch eager (F.scaled_dot_product_attention, which returns
only the output, and aten._scaled_dot_product_attention_math, which also returns the attention
weights as the etmetal op does), and the ratio etmetal / torch; then the median ratios. Each
etmetal run allocates and frees its outputs, as a model run does. Runs are timed alternately
so that both sides see the same machine load; the CPU seconds of the process are shown too.

Then, per problem and kernel, the device-memory traffic counted from the kernel's access
pattern (every load and store a thread issues to device memory, before any cache; the CPU
device has no memory counters) against the op's minimum (query, key, value read once, output
and weights written once).

usage: python3 tools/bench_ops_attention.py [--repeats R] [--quick]
"""

import argparse
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F

import etmetal_py
from etmetal_py import Tensor, ffi, lib

# Split and block heuristics of native/ops/attention.cpp (kept in step with it).
TARGET_THREADS = 16384
MIN_SPLIT_KEYS = 8
MAX_WEIGHT_KEYS = 32


def splits_of(row_count, keys):
    splits = min(max(-(-TARGET_THREADS // row_count), 1), max(1, -(-keys // MIN_SPLIT_KEYS)))
    split_length = -(-keys // splits)
    return -(-keys // split_length), split_length


def weight_keys_of(row_count, keys):
    return min(max(row_count * keys // TARGET_THREADS, 1), min(keys, MAX_WEIGHT_KEYS))


def visible_keys(rows, keys, causal):
    """Sum over query rows of the keys each row attends to."""
    if not causal:
        return rows * keys
    return sum(min(i + 1, keys) for i in range(rows))


def kernel_traffic(batch, heads, rows, keys, head_dim, value_dim, causal, itemsize):
    """[(kernel, bytes)] of the three dispatches, and the op's minimum bytes."""
    row_count = batch * heads * rows
    splits, split_length = splits_of(row_count, keys)
    visible = batch * heads * visible_keys(rows, keys, causal)
    record = value_dim + 2
    partial = (row_count * splits * head_dim * itemsize            # each split thread loads its query row
               + visible * (head_dim + value_dim) * itemsize       # keys and values of its visible keys
               + row_count * splits * record * 4)                  # writes its partial record
    combine = (row_count * value_dim * splits * 4 * 4              # max pass + (max, sum, value) pass
               + row_count * value_dim * itemsize + row_count * 4)  # output and log-sum-exp
    weight_keys = weight_keys_of(row_count, keys)
    blocks = -(-keys // weight_keys)
    weights = (row_count * blocks * (head_dim * itemsize + 4)      # query row and lse per thread
               + visible * head_dim * itemsize                      # visible keys
               + row_count * keys * itemsize)                       # weights written
    return [("sdpa_partial", partial), ("sdpa_combine", combine), ("sdpa_weights", weights)], splits, weight_keys


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median_seconds(runs, repeats, budget=1.5):
    """Median wall and CPU seconds of each run, timed alternately."""
    for run in runs:
        run()  # warm: kernel compile, caches, thread pools
    walls = [[] for _ in runs]
    cpus = [[] for _ in runs]
    deadline = time.perf_counter() + budget
    while len(walls[0]) < repeats or (time.perf_counter() < deadline and len(walls[0]) < 30):
        for run, wall, cpu in zip(runs, walls, cpus):
            start_cpu, start = cpu_seconds(), time.perf_counter()
            run()
            wall.append(time.perf_counter() - start)
            cpu.append(cpu_seconds() - start_cpu)
    return [statistics.median(w) for w in walls], [statistics.median(c) for c in cpus]


def bench(kind, batch, heads, kv_heads, rows, keys, dim, dtype, causal, repeats):
    torch.manual_seed(0)
    q = torch.randn(batch, heads, rows, dim).to(dtype)
    k = torch.randn(batch, kv_heads, keys, dim).to(dtype)
    v = torch.randn(batch, kv_heads, keys, dim).to(dtype)
    device_q, device_k, device_v = (Tensor.from_array(x) for x in (q, k, v))
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    results = []

    def run_etmetal():
        etmetal_py.check(lib.aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
            device_q.handle, device_k.handle, device_v.handle, ffi.NULL, 0.0, int(causal), ffi.NULL,
            ffi.NULL, 1, r0, r1))
        results[:] = [Tensor(r0[0]), Tensor(r1[0])]
        etmetal_py.synchronize()

    group = heads // kv_heads
    k_full, v_full = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    def run_torch():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def run_torch_math():
        return torch.ops.aten._scaled_dot_product_attention_math(q, k_full, v_full, None, 0.0, causal)

    (etm_s, torch_s, math_s), (etm_cpu, torch_cpu, math_cpu) = median_seconds(
        [run_etmetal, run_torch, run_torch_math], repeats)
    expected = torch.ops.aten._scaled_dot_product_attention_math(
        q.double(), k_full.double(), v_full.double(), None, 0.0, causal)[0]
    error = (results[0].torch().double() - expected).abs().max().item()
    itemsize = q.element_size()
    traffic, splits, weight_keys = kernel_traffic(batch, heads, rows, keys, dim, dim, causal, itemsize)
    minimum = (q.numel() + k.numel() + v.numel() + batch * heads * rows * dim
               + batch * heads * rows * keys) * itemsize
    tokens = batch * rows
    return dict(kind=kind, problem=f"B{batch} H{heads}/{kv_heads} L{rows} S{keys} D{dim}{' causal' if causal else ''}",
                dtype=str(dtype).replace("torch.", ""), ms=etm_s * 1e3, cpu_ms=etm_cpu * 1e3,
                torch_ms=torch_s * 1e3, torch_cpu_ms=torch_cpu * 1e3, math_ms=math_s * 1e3,
                etmetal=tokens / etm_s, torch=tokens / torch_s, math=tokens / math_s, error=error,
                traffic=traffic, minimum=minimum, splits=splits, weight_keys=weight_keys)


PROBLEMS = [  # (kind, batch, heads, kv_heads, rows, keys, head_dim, dtype, causal)
    ("decode", 1, 32, 8, 1, 1024, 128, torch.float32, False),
    ("decode", 1, 32, 8, 1, 2048, 128, torch.float32, False),
    ("decode", 1, 32, 8, 1, 4096, 128, torch.float32, False),
    ("decode", 1, 32, 8, 1, 2048, 128, torch.float16, False),
    ("decode", 1, 32, 8, 1, 2048, 128, torch.bfloat16, False),
    ("decode", 4, 16, 16, 1, 1024, 64, torch.float32, False),
    ("prefill", 1, 8, 8, 128, 128, 64, torch.float32, True),
    ("prefill", 1, 8, 8, 512, 512, 64, torch.float32, True),
    ("prefill", 1, 8, 2, 256, 256, 128, torch.float16, True),
]
QUICK = [PROBLEMS[0], PROBLEMS[2], PROBLEMS[6]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="at least this many timed runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="three problems only")
    args = parser.parse_args()

    print(f"device: {etmetal_py.device_name()} ({etmetal_py.device_kind()}); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = [bench(*p, args.repeats) for p in (QUICK if args.quick else PROBLEMS)]

    print("\ntokens/s (ratio = etmetal / torch eager F.sdpa; math = aten._scaled_dot_product_attention_math,")
    print("which also returns the weights; ms and cpu ms are etmetal's wall and process-CPU medians;")
    print("error = max |out - float64 reference|)")
    print(f"{'kind':8} {'problem':32} {'dtype':9} {'ms':>8} {'cpu ms':>8} {'etmetal':>10} {'torch':>10} "
          f"{'ratio':>7} {'math':>10} {'ratio':>7} {'error':>8}")
    for r in rows:
        print(f"{r['kind']:8} {r['problem']:32} {r['dtype']:9} {r['ms']:8.2f} {r['cpu_ms']:8.2f} "
              f"{r['etmetal']:10.1f} {r['torch']:10.1f} {r['etmetal'] / r['torch']:7.3f} "
              f"{r['math']:10.1f} {r['etmetal'] / r['math']:7.3f} {r['error']:8.1e}")
    for kind in ("decode", "prefill"):
        picked = [r for r in rows if r["kind"] == kind]
        if picked:
            print(f"median ratio {kind}: {statistics.median(r['etmetal'] / r['torch'] for r in picked):.3f} vs F.sdpa, "
                  f"{statistics.median(r['etmetal'] / r['math'] for r in picked):.3f} vs the math op "
                  f"over {len(picked)} problems")

    print("\ndevice-memory traffic per kernel (counted from the access pattern) vs the op's minimum")
    print(f"{'problem':32} {'dtype':9} {'kernel':13} {'MB':>9} {'minimum MB':>11} {'ratio':>7}  geometry")
    for r in rows:
        for name, nbytes in r["traffic"]:
            geometry = (f"{r['splits']} key splits" if name == "sdpa_partial"
                        else f"{r['weight_keys']} keys/thread" if name == "sdpa_weights" else "")
            print(f"{r['problem']:32} {r['dtype']:9} {name:13} {nbytes / 1e6:9.3f} {r['minimum'] / 1e6:11.3f} "
                  f"{nbytes / r['minimum']:7.2f}  {geometry}")
        total = sum(n for _, n in r["traffic"])
        print(f"{r['problem']:32} {r['dtype']:9} {'all three':13} {total / 1e6:9.3f} {r['minimum'] / 1e6:11.3f} "
              f"{total / r['minimum']:7.2f}")


if __name__ == "__main__":
    main()
