"""Runs test files under the kernel sanitizer (ETMETAL_VALIDATE=1) and counts its reports.

    python3 tools/validation_sweep.py [--tests default|slow|all] [-k EXPR] [--logs DIR] [FILE ...]

Every kernel those tests compile (the project's shaders, the Inductor kernels of compiled
models) runs with access checks; a report fails its dispatch, so it shows as a failing test
whose message holds "ETMETAL_VALIDATE found". Files run one at a time (nice, one pytest
process each, in a fresh process so the flag is set before the library loads); without FILE
arguments: every file of tests/ops/ and tests/aoti/test_models.py. --tests picks the default
tests (not marked slow), the slow ones or all of them; -k passes a selection to pytest.
Checked kernels run many times slower, so the kernel time limit is raised to 30 minutes unless
ETMETAL_KERNEL_TIMEOUT_MS is set. Prints per file the tests that passed and failed and the
sanitizer reports (counted from ETMETAL_VALIDATE_REPORTS, which the tests' child processes,
such as C++ hosts, write too), then the totals; --logs DIR keeps each file's whole output
there. Far too slow for CI (every kernel compiles again, instrumented, and runs checked): run
it after changing the checker, the translator or a shader.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKS = {"default": "not slow", "slow": "slow", "all": ""}


def default_files() -> list:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "ops").glob("test_*.py")) + [
        "tests/aoti/test_models.py"]


def count(pattern: str, text: str) -> int:
    match = re.search(r"(\d+) " + pattern, text)
    return int(match.group(1)) if match else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--tests", choices=sorted(MARKS), default="default",
                        help="the tests not marked slow (default), those marked slow, or all")
    parser.add_argument("-k", dest="expression", help="only the tests pytest's -k EXPRESSION selects")
    parser.add_argument("--logs", type=Path, help="a folder for each file's whole output and reports")
    args = parser.parse_args()
    env = dict(os.environ, ETMETAL_VALIDATE="1", ETMETAL_DEVICE="cpu")
    env.setdefault("ETMETAL_KERNEL_TIMEOUT_MS", str(30 * 60 * 1000))
    totals = {"passed": 0, "failed": 0, "reports": 0}
    for path in args.files or default_files():
        command = ["nice", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKS[args.tests],
                   *(["-k", args.expression] if args.expression else []), path]
        with tempfile.TemporaryDirectory() as folder:
            report_file = Path(folder) / "reports.txt"
            result = subprocess.run(command, cwd=ROOT, env=dict(env, ETMETAL_VALIDATE_REPORTS=str(report_file)),
                                    capture_output=True, text=True)
            reported = report_file.read_text() if report_file.exists() else ""
        output = result.stdout + result.stderr
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            (args.logs / (path.replace("/", "_") + ".log")).write_text(output + "\n" + reported)
        passed, failed = count("passed", output), count("failed", output) + count("error", output)
        reports = reported.count("ETMETAL_VALIDATE found")
        totals["passed"] += passed
        totals["failed"] += failed
        totals["reports"] += reports
        print(f"{path}: {passed} passed, {failed} failed, {reports} sanitizer reports", flush=True)
        if failed or reports:
            print(output[-4000:] + reported[:4000], flush=True)
    print(f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['reports']} sanitizer reports")


if __name__ == "__main__":
    main()
