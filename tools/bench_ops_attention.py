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
Device-memory traffic per kernel is measured exactly by tools/kernel_report.py (the CPU
device's traffic counters).

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
    tokens = batch * rows
    return dict(kind=kind, problem=f"B{batch} H{heads}/{kv_heads} L{rows} S{keys} D{dim}{' causal' if causal else ''}",
                dtype=str(dtype).replace("torch.", ""), ms=etm_s * 1e3, cpu_ms=etm_cpu * 1e3,
                torch_ms=torch_s * 1e3, torch_cpu_ms=torch_cpu * 1e3, math_ms=math_s * 1e3,
                etmetal=tokens / etm_s, torch=tokens / torch_s, math=tokens / math_s, error=error)


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


if __name__ == "__main__":
    main()
