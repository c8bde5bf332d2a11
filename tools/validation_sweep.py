"""Runs test files under the kernel sanitizer (ETMETAL_VALIDATE=1) and counts its reports.

    python3 tools/validation_sweep.py [--slow] [FILE ...]

Every kernel those tests compile (the project's shaders, the Inductor kernels of compiled
models) runs with access checks; a report fails its dispatch, so it shows as a failing test
whose message holds "ETMETAL_VALIDATE found". Files run one at a time (nice, one pytest
process each, in a fresh process so the flag is set before the library loads); without FILE
arguments: every file of tests/ops/ and tests/aoti/test_models.py. --slow runs the tests
marked slow instead of the default ones. Prints per file the tests that passed and failed and
the sanitizer reports, then the totals. Far too slow for CI (every kernel compiles again,
instrumented, and runs checked): run it after changing the checker, the translator or a shader.
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_files() -> list:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "ops").glob("test_*.py")) + [
        "tests/aoti/test_models.py"]


def count(pattern: str, text: str) -> int:
    match = re.search(r"(\d+) " + pattern, text)
    return int(match.group(1)) if match else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--slow", action="store_true", help="the tests marked slow instead of the default ones")
    args = parser.parse_args()
    env = dict(os.environ, ETMETAL_VALIDATE="1", ETMETAL_DEVICE="cpu")
    totals = {"passed": 0, "failed": 0, "reports": 0}
    for path in args.files or default_files():
        command = ["nice", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                   "slow" if args.slow else "not slow", path]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        passed, failed = count("passed", output), count("failed", output) + count("error", output)
        reports = output.count("ETMETAL_VALIDATE found")
        totals["passed"] += passed
        totals["failed"] += failed
        totals["reports"] += reports
        print(f"{path}: {passed} passed, {failed} failed, {reports} sanitizer reports", flush=True)
        if failed or reports:
            print(output[-4000:], flush=True)
    print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['reports']} sanitizer reports")


if __name__ == "__main__":
    main()
