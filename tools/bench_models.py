"""Benchmark the AOTInductor test-suite models: etmetal on the default device vs torch eager
on CPU, measured in the same process, plus the compile time of each package.

    python tools/bench_models.py [--repeat 50] [--models pointwise layernorm ...]

Latency is per call as a user sees it: for etmetal, copying the inputs to the device, the run,
synchronization and copying the outputs back. The ratio is etmetal median / eager median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "aoti"))

import aoti_models  # noqa: E402  (the suite's models)
import etmetal_py  # noqa: E402
from etmetal_py.aoti import aoti_compile_and_package, aoti_load_package, export  # noqa: E402
from etmetal_py.demo import DecoderBlock  # noqa: E402


def _decoder_case() -> aoti_models.Case:
    return aoti_models.Case(DecoderBlock, lambda g: (torch.randint(0, 256, (2, 16), generator=g),),
                            atol=1e-3, rtol=1e-3)


def all_cases() -> dict[str, aoti_models.Case]:
    cases = dict(aoti_models.CASES)
    cases["decoder_block"] = _decoder_case()
    return cases


def median_seconds(function, repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def max_error(actual, expected) -> float:
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    return max(float((a.double() - e.double()).abs().max()) if a.numel() else 0.0
               for a, e in zip(actual, expected))


def bench_case(name: str, case: aoti_models.Case, folder: str, repeat: int,
               warmup: int) -> dict:
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs(torch.Generator().manual_seed(1))
    start = time.perf_counter()
    program = export(model, inputs, dynamic_shapes=case.dynamic_shapes)
    package = aoti_compile_and_package(program, package_path=os.path.join(folder, f"{name}.pt2"),
                                       **case.compile_options)
    compile_seconds = time.perf_counter() - start
    with torch.no_grad():
        expected = model(*inputs)
        eager = median_seconds(lambda: model(*inputs), repeat, warmup)
    with aoti_load_package(package) as runner:
        error = max_error(runner(*inputs), expected)
        compiled = median_seconds(lambda: runner(*inputs), repeat, warmup)
    return {"name": name, "compile": compile_seconds, "eager": eager, "etmetal": compiled,
            "error": error}


def main(argv: list[str] | None = None) -> int:
    cases = all_cases()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=50, help="timed calls per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    parser.add_argument("--models", nargs="*", choices=sorted(cases), help="default: all")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be at least 1 and --warmup at least 0")
    selected = args.models or list(cases)
    print(f"device: {etmetal_py.device_name()} ({etmetal_py.device_kind()}); "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads; "
          f"median of {args.repeat} calls")
    header = f"{'model':<18}{'compile s':>10}{'eager ms':>11}{'etmetal ms':>12}{'ratio':>8}" \
             f"{'max err':>10}"
    print(header)
    print("-" * len(header))
    failures = 0
    with tempfile.TemporaryDirectory(prefix="etmetal-bench-") as folder:
        for name in selected:
            try:
                row = bench_case(name, cases[name], folder, args.repeat, args.warmup)
            except Exception as exc:  # one broken model must not hide the others' numbers
                failures += 1
                print(f"{name:<18}failed: {' '.join(str(exc).split())[:100]}")
                continue
            print(f"{row['name']:<18}{row['compile']:>10.1f}{row['eager'] * 1e3:>11.3f}"
                  f"{row['etmetal'] * 1e3:>12.3f}{row['etmetal'] / row['eager']:>8.2f}"
                  f"{row['error']:>10.2g}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
