"""Benchmark models, ops and kernels: etmetal on the default device vs torch eager on CPU,
measured side by side in the same process, with 1 and 2 worker threads (or --workers).

    python tools/bench_models.py [--workers 1 2] [--models decoder_block llama_like ...]
                                 [--no-ops] [--no-kernels] [--large]

Models: the AOTInductor test-suite models, the demo decoder block, a Llama-like and a
BERT-like model built from transformers configs with random weights (when transformers is
installed: `pip install transformers`; a benchmark-only dependency), and a resnet18-like and
a UNet-like convolutional net at 64x64 defined here. Each package is compiled once, then run
in one child process per worker count (ETMETAL_CPU_THREADS=w, torch.set_num_threads(w)).

Latency is per call as a user sees it: for etmetal, copying the inputs to the device, the run,
synchronization and copying the outputs back. The ratio is etmetal median / eager median (lower
is better). The cpu ratio compares the process's CPU seconds per call (all threads: etmetal's
workers and queue thread, torch's pool): steadier than wall time on a loaded machine, where
other processes' threads delay either side's. Ops: mm (256x576x64, and 1024^3 with --large), a 64->64 3x3 convolution on 16x16,
and SDPA; ratio of times. Kernels: GPU threads per second of a threadgroup-barrier tree
reduction and a simd_sum reduction (CPU device only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "aoti"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import aoti_models  # noqa: E402  (the suite's models)
import etmetal_py  # noqa: E402
from etmetal_py.aoti import aoti_compile_and_package, aoti_load_package, export  # noqa: E402
from etmetal_py.demo import DecoderBlock  # noqa: E402


def _decoder_case() -> aoti_models.Case:
    return aoti_models.Case(DecoderBlock, lambda g: (torch.randint(0, 256, (2, 16), generator=g),),
                            atol=1e-3, rtol=1e-3)


class _FirstOutput(nn.Module):
    """A transformers model returning one tensor (its first output)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)[0]


def _llama_like() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    return _FirstOutput(LlamaForCausalLM(config))


def _bert_like() -> nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64)
    return _FirstOutput(BertModel(config, add_pooling_layer=False))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNetLike(nn.Module):
    """resnet18's layout (7x7 stem, max pool, 2-2-2-2 basic blocks of 64-512 channels)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class UNetLike(nn.Module):
    """Two downsampling levels with skip connections, transposed-conv upsampling, group norm."""

    def __init__(self, width: int = 16):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.GroupNorm(4, cout), nn.SiLU(),
                                 nn.Conv2d(cout, cout, 3, 1, 1), nn.GroupNorm(4, cout), nn.SiLU())

        w = width
        self.enc1, self.enc2, self.mid = block(3, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, 2), block(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * w, w, 2, 2), block(2 * w, w)
        self.out = nn.Conv2d(w, 3, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(nn.functional.max_pool2d(e1, 2))
        m = self.mid(nn.functional.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.out(d1)


def _ids(g: torch.Generator) -> tuple:
    return (torch.randint(0, 256, (1, 16), generator=g),)


def _image(g: torch.Generator) -> tuple:
    return (torch.randn(1, 3, 64, 64, generator=g),)


def _has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def all_cases() -> dict[str, aoti_models.Case]:
    cases = dict(aoti_models.CASES)
    cases["decoder_block"] = _decoder_case()
    cases["llama_like"] = aoti_models.Case(_llama_like, _ids, atol=1e-3, rtol=1e-3)
    cases["bert_like"] = aoti_models.Case(_bert_like, _ids, atol=1e-3, rtol=1e-3)
    cases["resnet18_like"] = aoti_models.Case(ResNetLike, _image, atol=1e-3, rtol=1e-3)
    cases["unet_like"] = aoti_models.Case(UNetLike, _image, atol=1e-3, rtol=1e-3)
    return cases


NEEDS_TRANSFORMERS = {"llama_like", "bert_like"}
DEFAULT_MODELS = ["decoder_block", "llama_like", "bert_like", "resnet18_like", "unet_like", "mlp_gelu",
                  "layernorm", "softmax_dynamic"]


def median_times(function, repeat: int, warmup: int, budget: float = 3.0) -> tuple[float, float]:
    """Medians of the wall and the process CPU seconds of `repeat` timed calls, fewer (at
    least 3) when they exceed `budget` seconds."""
    for _ in range(warmup):
        function()
    walls, cpus = [], []
    deadline = time.perf_counter() + budget
    while len(walls) < repeat and (len(walls) < 3 or time.perf_counter() < deadline):
        start, start_cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return statistics.median(walls), statistics.median(cpus)


def median_seconds(function, repeat: int, warmup: int, budget: float = 3.0) -> float:
    """Median wall seconds of `repeat` timed calls (see median_times)."""
    return median_times(function, repeat, warmup, budget)[0]


def max_error(actual, expected) -> float:
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    return max(float((a.double() - e.double()).abs().max()) if a.numel() else 0.0
               for a, e in zip(actual, expected))


def compile_case(name: str, case: aoti_models.Case, folder: str) -> dict:
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs(torch.Generator().manual_seed(1))
    start = time.perf_counter()
    program = export(model, inputs, dynamic_shapes=case.dynamic_shapes)
    package = aoti_compile_and_package(program, package_path=os.path.join(folder, f"{name}.pt2"),
                                       **case.compile_options)
    return {"name": name, "compile": time.perf_counter() - start, "package": package}


def run_case(name: str, case: aoti_models.Case, folder: str, repeat: int, warmup: int) -> dict:
    torch.manual_seed(0)  # the weights compile_case compiled (the error column checks it)
    model = case.build().eval()
    inputs = case.inputs(torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(*inputs)
        eager, eager_cpu = median_times(lambda: model(*inputs), repeat, warmup)
    with aoti_load_package(os.path.join(folder, f"{name}.pt2")) as runner:
        error = max_error(runner(*inputs), expected)
        compiled, compiled_cpu = median_times(lambda: runner(*inputs), repeat, warmup)
    return {"kind": "model", "name": name, "eager": eager, "etmetal": compiled, "error": error,
            "eager_cpu": eager_cpu, "etmetal_cpu": compiled_cpu}


def run_ops(large: bool, repeat: int) -> list[dict]:
    import bench_ops_attention
    import bench_ops_matmul_conv

    def row(name, seconds, eager_seconds, error):
        return {"kind": "op", "name": name, "etmetal": seconds, "eager": eager_seconds, "error": error}

    rows = []
    problems = [(256, 576, 64)] + ([(1024, 1024, 1024)] if large else [])
    for m, k, n in problems:
        r = bench_ops_matmul_conv.bench_mm(m, k, n, torch.float32, False, min(repeat, 5))
        seconds = r["milliseconds"] / 1e3
        rows.append(row(f"mm {m}x{k}x{n}", seconds, seconds * r["etmetal"] / r["torch"], r["error"]))
    r = bench_ops_matmul_conv.bench_conv((1, 64, 16, 16), (64, 64, 3, 3), [1, 1], [1, 1], [1, 1], 1,
                                         torch.float32, min(repeat, 5))
    seconds = r["milliseconds"] / 1e3
    rows.append(row("conv 64->64 3x3 16x16", seconds, seconds * r["etmetal"] / r["torch"], r["error"]))
    r = bench_ops_attention.bench("sdpa", 1, 8, 8, 128, 128, 64, torch.float32, True, min(repeat, 5))
    rows.append(row("sdpa B1 H8 L128 D64 causal", r["ms"] / 1e3, r["torch_ms"] / 1e3, r["error"]))
    return rows


def run_kernels(repeat: int) -> list[dict]:
    """GPU threads per second of the barrier and simd_sum reductions of bench_cpu_device."""
    import numpy as np

    import bench_cpu_device
    from etmetal_py import ffi, lib
    from etmetal_py.tensors import Tensor

    if etmetal_py.device_kind() != "cpu":
        return []
    threads = 1 << 22
    data = np.random.default_rng(0).integers(-8, 8, threads).astype(np.float32)
    expected = data.reshape(-1, 256).sum(axis=1)
    device_data = Tensor.from_array(data)
    rows = []
    for label, source, name in (("barrier tree reduction", bench_cpu_device.TREE_REDUCTION, "tree_sum"),
                                ("simd_sum reduction", bench_cpu_device.SIMD_REDUCTION, "simd_group_sum")):
        library = ffi.new("AOTIMetalShaderLibraryHandle*")
        etmetal_py.check(lib.aoti_torch_mps_create_shader_library(source.encode(), library))
        function = ffi.new("AOTIMetalKernelFunctionHandle*")
        etmetal_py.check(lib.aoti_torch_mps_get_kernel_function(library[0], name.encode(), function))
        sums = Tensor.empty([threads // 256])

        def dispatch():
            etmetal_py.check(lib.aoti_torch_mps_start_encoding(function[0]))
            for index, tensor in enumerate((device_data, sums)):
                etmetal_py.check(lib.aoti_torch_mps_set_arg_tensor(function[0], index, tensor.handle))
            etmetal_py.check(lib.aoti_torch_mps_dispatch_single_with_group_size(function[0], threads, 256))
            etmetal_py.synchronize()

        dispatch()
        error = float(np.abs(sums.numpy() - expected).max())
        seconds = median_seconds(dispatch, min(repeat, 5), 1)
        rows.append({"kind": "kernel", "name": label, "rate": threads / seconds, "error": error})
        etmetal_py.check(lib.aoti_torch_mps_delete_shader_library(library[0]))
    return rows


def child_main(args) -> int:
    torch.set_num_threads(args.workers_now)
    cases = all_cases()
    for name in args.models:
        try:
            row = run_case(name, cases[name], args.folder, args.repeat, args.warmup)
        except Exception as exc:  # one broken model must not hide the others' numbers
            row = {"kind": "model", "name": name, "failed": " ".join(str(exc).split())[:300]}
        print(json.dumps(row), flush=True)
    rows = (run_ops(args.large, args.repeat) if args.ops else []) + \
        (run_kernels(args.repeat) if args.kernels else [])
    for row in rows:
        print(json.dumps(row), flush=True)
    return 0


def run_child(args, workers: int, folder: str, models: list[str]) -> list[dict]:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--folder", folder,
               "--workers-now", str(workers), "--repeat", str(args.repeat), "--warmup",
               str(args.warmup), "--models", *models]
    command += [] if args.ops else ["--no-ops"]
    command += [] if args.kernels else ["--no-kernels"]
    command += ["--large"] if args.large else []
    env = dict(os.environ, ETMETAL_CPU_THREADS=str(workers))
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0:
        rows.append({"kind": "error", "name": f"{workers} workers",
                     "failed": " ".join(result.stderr.split())[-300:]})
    return rows


def main(argv: list[str] | None = None) -> int:
    cases = all_cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed calls (fewer past ~3 s)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    parser.add_argument("--models", nargs="*", choices=sorted(cases),
                        help=f"default: {' '.join(DEFAULT_MODELS)}")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2],
                        help="worker-thread counts to compare (default 1 2)")
    parser.add_argument("--no-ops", dest="ops", action="store_false")
    parser.add_argument("--no-kernels", dest="kernels", action="store_false")
    parser.add_argument("--large", action="store_true", help="add the 1024^3 matmul")
    parser.add_argument("--save-packages", metavar="FOLDER",
                        help="only compile the models into FOLDER (to run them elsewhere)")
    parser.add_argument("--packages", metavar="FOLDER",
                        help="run the models compiled into FOLDER by --save-packages")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--workers-now", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0 or min(args.workers) < 1:
        parser.error("--repeat and --workers must be at least 1 and --warmup at least 0")
    if args.child:
        return child_main(args)
    selected = args.models if args.models is not None else DEFAULT_MODELS
    skipped = [m for m in selected if m in NEEDS_TRANSFORMERS and not _has_transformers()]
    selected = [m for m in selected if m not in skipped]
    print(f"device: {etmetal_py.device_name()} ({etmetal_py.device_kind()}); torch {torch.__version__}; "
          f"eager with as many torch threads as etmetal workers; medians")
    if skipped:
        print(f"skipped (pip install transformers): {' '.join(skipped)}")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="etmetal-bench-") as temporary:
        folder = args.packages or args.save_packages or temporary
        if args.save_packages:
            os.makedirs(folder, exist_ok=True)
        compiled = []
        for name in selected:
            if args.packages:
                if os.path.exists(os.path.join(folder, f"{name}.pt2")):
                    compiled.append(name)
                continue
            try:
                row = compile_case(name, cases[name], folder)
                compiled.append(name)
                print(f"compiled {name} in {row['compile']:.1f} s", flush=True)
            except Exception as exc:
                failures += 1
                print(f"{name}: compile failed: {' '.join(str(exc).split())[:100]}", flush=True)
        if args.save_packages:
            return 1 if failures else 0
        results = {w: run_child(args, w, folder, compiled) for w in args.workers}
    names = list(dict.fromkeys(r["name"] for rows in results.values() for r in rows))
    head = f"{'':<30}" + "".join(f"{f'{w} worker' + ('s' if w > 1 else ''):>45}" for w in args.workers)
    print("\n" + head)
    print(f"{'':<30}" + f"{'eager ms':>10}{'etmetal ms':>12}{'ratio':>12}{'cpu ratio':>11}" * len(args.workers))
    reasons = []
    for name in names:
        line = f"{name:<30}"
        for w in args.workers:
            row = next((r for r in results[w] if r["name"] == name), None)
            if row is None or "failed" in row:
                failures += 1
                line += f"{'failed (below)':>45}"
                reasons.append(f"{name}, {w} workers: {(row or {}).get('failed', 'no result')}")
            elif row["kind"] == "kernel":
                line += f"{'':>10}{row['rate'] / 1e6:>10.1f} M{'threads/s':>12}{'':>11}"
            else:
                cpu_ratio = f"{row['etmetal_cpu'] / row['eager_cpu']:>10.2f}x" if row.get("eager_cpu") else f"{'':>11}"
                line += f"{row['eager'] * 1e3:>10.3f}{row['etmetal'] * 1e3:>12.3f}" \
                        f"{row['etmetal'] / row['eager']:>11.2f}x{cpu_ratio}"
        print(line)
    for reason in reasons:
        print(f"failed: {reason}")
    if len(args.workers) > 1:
        base = args.workers[0]
        for w in args.workers[1:]:
            speedups = []
            for name in names:
                a = next((r for r in results[base] if r["name"] == name and "failed" not in r), None)
                b = next((r for r in results[w] if r["name"] == name and "failed" not in r), None)
                if a and b:
                    speedups.append(b["rate"] / a["rate"] if a["kind"] == "kernel"
                                    else a["etmetal"] / b["etmetal"])
            if speedups:
                print(f"etmetal speed-up of {w} workers over {base}: median {statistics.median(speedups):.2f}x "
                      f"(min {min(speedups):.2f}x, max {max(speedups):.2f}x)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
