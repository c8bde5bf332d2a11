#!/usr/bin/env python3
"""Inductor's c10::metal reductions on the CPU device: a model whose generated kernel calls one
(x.prod(dim=1): c10::metal::threadgroup_prod), compiled with AOTInductor for "mps" and run with
its kernel on barrier regions and forced onto fibers (ETMETAL_CPU_EXECUTION), one process per
run, the two alternating; medians of each process's median wall and CPU time, and the results
compared bit for bit.

usage: python3 tools/bench_inductor_reductions.py [--rows R] [--width W] [--pairs P]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("regions", "fibers")


def child(package, rows, width, output):
    """Loads the package, checks it against eager, saves its output; prints wall and CPU medians."""
    sys.path.insert(0, str(ROOT))
    import torch

    from etmetal_py.aoti import aoti_load_package

    x = torch.rand(rows, width, generator=torch.Generator().manual_seed(0)) * 0.4 + 0.8
    runner = aoti_load_package(package)
    result = runner(x)
    result = result[0] if isinstance(result, (list, tuple)) else result
    torch.testing.assert_close(result, x.prod(1), rtol=1e-4, atol=0)
    torch.save(result, output)
    walls, cpus = [], []
    for _ in range(9):
        start, cpu_start = time.perf_counter(), time.process_time()
        runner(x)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu_start)
    print(statistics.median(walls), statistics.median(cpus))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--width", type=int, default=512, help="reduced length (one threadgroup per row)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--child", nargs=2, metavar=("PACKAGE", "OUTPUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.rows, args.width, args.child[1])

    os.environ.setdefault("ETMETAL_DEVICE", "cpu")
    sys.path.insert(0, str(ROOT))
    import torch

    from etmetal_py.aoti import aoti_compile_and_package, export

    class Prod(torch.nn.Module):
        def forward(self, x):
            return x.prod(dim=1)

    with tempfile.TemporaryDirectory(prefix="etmetal-bench-") as folder:
        package = aoti_compile_and_package(export(Prod(), (torch.rand(args.rows, args.width),)),
                                           package_path=os.path.join(folder, "prod.pt2"))
        samples = {path: [] for path in PATHS}
        for _ in range(args.pairs):
            for path in PATHS:
                env = dict(os.environ, ETMETAL_CPU_EXECUTION=path, ETMETAL_LOG="debug")
                command = [sys.executable, __file__, "--rows", str(args.rows), "--width", str(args.width),
                           "--child", package, os.path.join(folder, f"{path}.pt")]
                run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                if f"runs as {'barrier regions' if path == 'regions' else 'fibers'}" not in run.stderr:
                    sys.exit(f"the kernel did not run on {path}:\n{run.stderr}")
                samples[path].append(tuple(float(v) for v in run.stdout.split()))
        same = torch.equal(torch.load(os.path.join(folder, "regions.pt")), torch.load(os.path.join(folder, "fibers.pt")))

    print(f"x.prod(dim=1), {args.rows}x{args.width} float32, AOTInductor kernel with c10::metal::threadgroup_prod; "
          f"regions and fibers bit-identical: {same}")
    medians = {path: [statistics.median(s[k] for s in samples[path]) for k in (0, 1)] for path in PATHS}
    for path in PATHS:
        print(f"  {path}: wall {medians[path][0] * 1e3:.3f} ms, CPU {medians[path][1] * 1e3:.3f} ms")
    print(f"  fibers / regions: wall {medians['fibers'][0] / medians['regions'][0]:.1f}x, "
          f"CPU {medians['fibers'][1] / medians['regions'][1]:.1f}x")
    if not same:
        sys.exit("the two paths gave different bits")


if __name__ == "__main__":
    main()
