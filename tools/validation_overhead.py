"""How much slower kernels run under the sanitizer (ETMETAL_VALIDATE=1) on the CPU device.

    python3 tools/validation_overhead.py [--repeat 7]

Clean kernels of the sanitizer's tests (tests/cpu_device/validated_cases.py: elementwise
kernels, one of them a read-modify-write, a barrier kernel, a SIMD-group reduction) run in two child processes, one without and
one with validation (the flag is fixed per process); each prints the median time per dispatch
after a warm-up, and the ratio of the two medians is reported per kernel. The children run
kernels on one worker thread and time the process's CPU time, so the ratio stays what the
checks cost on a machine busy with other work (--wall: wall-clock time, every worker).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
from etmetal_py.kernels import compile_library

sys.path.insert(0, sys.argv[2])
from validated_cases import SOURCE  # the sanitizer tests' kernels: one clean kernel per execution path

repeat = int(sys.argv[1])
clock = time.perf_counter if sys.argv[3] == "wall" else time.process_time
n = 1 << 18
x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
y = np.zeros(n, np.float32)
sums = np.zeros(n // 256, np.float32)
cases = {
    "scale": lambda f: f(x, y, 3, threads=n, group=256),
    "add_into": lambda f: f(y, x, threads=n, group=256),
    "reverse_groups": lambda f: f(x, y, threadgroups=n // 64, group=64),
    "group_sums": lambda f: f(x, sums, threadgroups=n // 256, group=256),
}
out = {}
with compile_library(SOURCE) as library:
    for name, call in cases.items():
        function = library.function(name)
        call(function)
        times = []
        for _ in range(repeat):
            start = clock()
            call(function)
            times.append(clock() - start)
        out[name] = sorted(times)[len(times) // 2]
print(json.dumps(out))
"""


def run(validate: bool, repeat: int, wall: bool) -> dict:
    env = dict(os.environ, ETMETAL_VALIDATE="1" if validate else "0", ETMETAL_DEVICE="cpu",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not wall:
        env["ETMETAL_CPU_THREADS"] = "1"
    result = subprocess.run([sys.executable, "-c", CHILD, str(repeat), str(ROOT / "tests" / "cpu_device"),
                             "wall" if wall else "cpu"], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--wall", action="store_true", help="wall-clock time on every worker thread")
    args = parser.parse_args()
    plain, checked = run(False, args.repeat, args.wall), run(True, args.repeat, args.wall)
    print(f"{'kernel (2^18 threads)':24} {'plain ms':>10} {'validated ms':>13} {'ratio':>7}")
    for name in plain:
        print(f"{name:24} {plain[name] * 1e3:10.2f} {checked[name] * 1e3:13.2f} {checked[name] / plain[name]:7.1f}x")


if __name__ == "__main__":
    main()
