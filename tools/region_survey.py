"""Lists the kernels that run on fibers instead of barrier regions on the CPU device, and why.

    PYTHONPATH=$PWD python3 tools/region_survey.py [--only STEM ...] [--log FILE ...] [--json out.json]

Without --log: every shaders/*.metal becomes one library (its "params/" includes inlined, as
libetmetal embeds them), created with ETMETAL_LOG=debug in a child process with a private cache.
Library creation logs the kernels the translator gives no region form although they synchronise
("declined": a shape the region form does not handle, by design) and, from the library's
syntax-only check (or the one kernel's build), region forms that do not compile ("failed": a
bug; such a kernel also compiles twice), named by the MSL lines of the errors.

--log FILE: reads an ETMETAL_LOG=debug log instead, e.g. of a test run
(`ETMETAL_LOG=debug python3 -m pytest tests/ops 2> ops.log`), which names the Inductor kernels
the run compiled that ran on fibers (`runs as fibers: why`).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHADERS = ROOT / "shaders"

DECLINED = re.compile(r"etmetal debug: kernel '([^']+)' has no region form: (.*)")
FAILED_KERNEL = re.compile(r"etmetal debug: kernel '([^']+)': its region form does not compile: (.*)")
FAILED_LIBRARY = re.compile(r"etmetal debug: the region forms of the library of kernel '([^']+)' do not compile: (.*)")
RAN_ON_FIBERS = re.compile(r"etmetal debug: kernel '([^']+)' runs as fibers: (.*)")

CHILD = "import sys; from etmetal_py.kernels import compile_library; compile_library(sys.stdin.read())"
ERROR_LINE = re.compile(r"library\.metal:(\d+):\d+: error:")
KERNEL_DEFINITION = re.compile(r"\bkernel\s+void\s+(\w+)|\[\[\s*kernel\s*\]\]\s*void\s+(\w+)")


def shader_source(path: Path) -> str:
    """The shader as libetmetal compiles it (native/ops/shader_kernels.cpp: shader_source): each
    line `#include "<path>"` replaced by that file under shaders/, expanded in turn and each file
    once, `#pragma once` lines dropped. The same text has the same cached translation and checks."""
    inlined = set()

    def expand(text: str) -> str:
        out = []
        for line in re.findall(r"[^\n]*\n|[^\n]+$", text):
            directive = line.lstrip(" \t")
            if directive.startswith("#pragma once"):
                continue
            if not directive.startswith('#include "'):
                out.append(line)
                continue
            included = directive[10:directive.index('"', 10)]
            if included not in inlined:
                inlined.add(included)
                out.append(expand((SHADERS / included).read_text()))
        if text and not text.endswith("\n"):
            out.append("\n")
        return "".join(out)

    return expand(path.read_text())


def kernel_lines(source: str) -> list:
    """(line, name) of each kernel definition, in source order."""
    return [(source.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2))
            for m in KERNEL_DEFINITION.finditer(source)]


def parse_log(text: str, source: str | None = None) -> dict:
    """{"declined": {kernel: why}, "failed": {kernel: error}, "fibers": {kernel: why}} from an
    ETMETAL_LOG=debug log. A library whose region forms do not compile names its failing kernels
    by the MSL lines of the errors (the kernel defined last before each) when `source` is given,
    else by its first kernel."""
    found = {"declined": {}, "failed": {}, "fibers": {}}
    messages = re.split(r"^(?=etmetal debug: )", text, flags=re.M)
    kernels = kernel_lines(source) if source else []
    for message in messages:
        first = message.split("\n", 1)[0]
        for key, pattern in (("declined", DECLINED), ("failed", FAILED_KERNEL), ("fibers", RAN_ON_FIBERS)):
            match = pattern.search(first)
            # A path the run forced (ETMETAL_CPU_EXECUTION=fibers) is no fallback.
            if match and match.group(2) != "ETMETAL_CPU_EXECUTION":
                found[key].setdefault(match.group(1), match.group(2)[:300])
        match = FAILED_LIBRARY.search(first)
        if not match:
            continue
        errors = [(int(m.group(1)), line.strip()) for line in message.splitlines()
                  for m in [ERROR_LINE.search(line)] if m]
        named = False
        for number, error in errors:
            owners = [name for line, name in kernels if line <= number]
            if owners:
                found["failed"].setdefault(owners[-1], error[:300])
                named = True
        if not named:
            found["failed"].setdefault(match.group(1), (errors[0][1] if errors else match.group(2))[:300])
    return found


def survey_shader(path: Path, cache: str) -> dict:
    env = {**os.environ, "ETMETAL_LOG": "debug", "ETMETAL_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    source = shader_source(path)
    run = subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=1800)
    if run.returncode != 0:
        raise SystemExit(f"{path.name}: the library does not compile:\n{run.stderr[-3000:]}")
    return parse_log(run.stderr, source)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=[], help="shader file stems to survey, not all")
    parser.add_argument("--log", nargs="*", type=Path, default=[], help="ETMETAL_LOG=debug logs to read instead")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {}
    if args.log:
        for log in args.log:
            report[str(log)] = parse_log(log.read_text(errors="replace"))
    else:
        paths = sorted(p for p in SHADERS.glob("*.metal") if not args.only or p.stem in args.only)
        with tempfile.TemporaryDirectory(prefix="etm-region-survey-") as cache:
            for path in paths:
                report[path.name] = survey_shader(path, cache)
                found = report[path.name]
                print(f"{path.name}: {len(found['declined'])} declined, {len(found['failed'])} failed", flush=True)
    totals = {key: sum(len(found[key]) for found in report.values())
              for key in ("declined", "failed", "fibers")}
    for origin, found in report.items():
        for key, title in (("failed", "region form does not compile"), ("declined", "declined"),
                           ("fibers", "ran on fibers")):
            for kernel, why in sorted(found[key].items()):
                print(f"  {origin}: {kernel}: {title}: {why}")
    print("total: " + ", ".join(f"{count} {key}" for key, count in totals.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
