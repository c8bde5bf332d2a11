"""Mutation fuzz of the CPU device's MSL compiler: are compile errors located, and does
nothing crash or hang?

    python3 tools/fuzz_msl_errors.py [--count 200] [--seed 1] [--timeout 120] [FILE.metal ...]

Mutates the given MSL files (default: shaders/*.metal) one token edit at a time (delete,
duplicate, swap neighbours, insert a punctuator, replace an identifier with another of the
file), compiles each mutant in a child process (aoti_torch_mps_create_shader_library on the
CPU device, a private cache) and counts: compiled, errors citing an MSL line
(`library.metal:N`), errors citing none, child crashes, hangs (no answer within --timeout).
Prints the counts and the first lines of up to --show unlocated errors.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from region_survey import shader_source  # the shader with its params/ includes inlined, as libetmetal does

ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|::|->|<<|>>|&&|\|\||[^\s\w]")
PUNCTUATORS = list(")(}{;,<>*&[]=.:")

CHILD = """
import sys
from etmetal_py.kernels import compile_library
import etmetal_py
try:
    compile_library(sys.stdin.read()).close()
    print("COMPILED")
except etmetal_py.EtmetalError as error:
    print("ERROR:" + str(error))
"""


def mutate(source: str, rng: random.Random) -> str:
    spans = [m.span() for m in TOKEN.finditer(source)]
    identifiers = [source[a:b] for a, b in spans if source[a].isalpha() or source[a] == "_"]
    k = rng.randrange(len(spans))
    a, b = spans[k]
    text = source[a:b]
    operation = rng.choice(["delete", "duplicate", "swap", "insert", "replace"])
    if operation == "delete":
        return source[:a] + source[b:]
    if operation == "duplicate":
        return source[:b] + " " + text + source[b:]
    if operation == "swap" and k + 1 < len(spans):
        c, d = spans[k + 1]
        return source[:a] + source[c:d] + source[b:c] + text + source[d:]
    if operation == "replace" and identifiers:
        return source[:a] + rng.choice(identifiers) + source[b:]
    return source[:a] + rng.choice(PUNCTUATORS) + source[a:]


def classify(source: str, timeout: float, env: dict) -> tuple:
    try:
        result = subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True,
                                text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "hang", ""
    if result.returncode != 0:
        return "crash", f"exit {result.returncode}: {result.stderr[-400:]}"
    out = result.stdout
    if "COMPILED" in out:
        return "compiled", ""
    message = out.split("ERROR:", 1)[-1]
    if re.search(r"library\.metal:\d+", message):
        return "error with an MSL line", message
    return "error without an MSL line", message


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--show", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the counts here too")
    args = parser.parse_args()
    files = args.files or sorted((ROOT / "shaders").glob("*.metal"))
    sources = [shader_source(f) for f in files]
    rng = random.Random(args.seed)
    counts, unlocated = Counter(), []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CACHE_DIR=cache, ETMETAL_LOG="error",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for index in range(args.count):
            kind, message = classify(mutate(rng.choice(sources), rng), args.timeout, env)
            counts[kind] += 1
            if kind in ("error without an MSL line", "crash", "hang"):
                unlocated.append((kind, message.strip()[:600]))
            print(f"\r{index + 1}/{args.count} {dict(counts)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    errors = counts["error with an MSL line"] + counts["error without an MSL line"]
    print(json.dumps(dict(counts), indent=1))
    print(f"errors citing no MSL line: {counts['error without an MSL line']} of {errors}")
    for kind, message in unlocated[:args.show]:
        print(f"--- {kind}\n{message}")
    if args.json:
        args.json.write_text(json.dumps(dict(counts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
