"""Compiles a third-party MSL kernel corpus with the CPU device and reports what compiles.

    python3 tools/msl_corpus.py CHECKOUT [--root mlx/backend/metal/kernels] [--jobs 4]
                                         [--timeout 900] [--json out.json] [--only STEM ...]

Every `*.metal` file under CHECKOUT/ROOT (default: MLX's kernel folder) becomes one library:
quoted includes are inlined (searched next to the including file, then from CHECKOUT; each
header once), and so are angle-bracket includes of files under CHECKOUT; `<metal_*>` includes
stay (<ATen/...> is also searched under CHECKOUT/aten/src). For PyTorch's kernels
(--root aten/src/ATen/native/mps/kernels) the checkout needs the c10/metal headers and
aten/src/ATen/native/mps/kernels/*.h, which the torch wheel ships (torch/include/c10/metal,
torch/include/ATen/native/mps/kernels). Each library is created in a child process with a
private cache (aoti_torch_mps_create_shader_library: translation, then a syntax-only compile
of every kernel instantiation it has). Reports, per file and in total: compiled, declined
(a feature the CPU device refuses by design, such as MetalPerformancePrimitives) or failed,
the number of kernels (instantiations) the translator found in compiled files, and the first
error of the others. Nothing of the corpus is kept.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Quoted includes, and angle-bracket ones that name a file of the checkout (PyTorch's kernels
# include <c10/metal/...> from the repository root, where its build puts the include path).
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)', re.M)

CHILD = """
import re, sys
import etmetal_py
from etmetal_py.kernels import compile_library
try:
    library = compile_library(sys.stdin.read())
except etmetal_py.EtmetalError as error:
    print("ERROR:" + str(error))
    sys.exit(0)
try:
    library.function("etm_corpus_no_such_kernel")
except etmetal_py.EtmetalError as error:
    listed = re.search(r"it has: (.*)\\)", str(error))
    names = [] if listed is None or listed.group(1) == "no kernels" else listed.group(1).split(", ")
    print("KERNELS:%d" % len(names))
"""


def inline(path: Path, checkout: Path, seen: set) -> str:
    def replace(match):
        name = match.group(1) or match.group(2)
        # PyTorch's kernels include <ATen/...> from aten/src, where its build puts that path.
        rooted = (checkout / name, checkout / "aten" / "src" / name)
        candidates = (path.parent / name, *rooted) if match.group(1) else rooted
        for candidate in candidates:
            if candidate.exists():
                resolved = candidate.resolve()
                if resolved in seen:
                    return ""
                seen.add(resolved)
                return inline(resolved, checkout, seen)
        return match.group(0)  # left for the compiler, which reports it

    return INCLUDE.sub(replace, path.read_text())


def compile_file(path: Path, checkout: Path, timeout: float, env: dict) -> dict:
    source = inline(path, checkout, {path.resolve()})
    result = {"file": str(path.relative_to(checkout))}
    try:
        run = subprocess.run([sys.executable, "-c", CHILD], input=source, capture_output=True, text=True,
                             timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**result, "status": "timeout"}
    if run.returncode != 0:
        return {**result, "status": "crash", "error": run.stderr[-500:]}
    if "KERNELS:" in run.stdout:
        return {**result, "status": "compiled", "kernels": int(run.stdout.split("KERNELS:")[1].split()[0])}
    message = run.stdout.split("ERROR:", 1)[-1].strip()
    first = next((line for line in message.splitlines() if "error" in line), message[:300])
    # What the CPU device declines on purpose (Apple's MetalPerformancePrimitives) is counted apart.
    status = "declined" if "is not supported by the CPU device" in message else "failed"
    return {**result, "status": status, "error": first[:400]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--root", default="mlx/backend/metal/kernels")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", nargs="*", default=[], help="file names (stems) to compile, not all")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    files = sorted(f for f in (checkout / args.root).rglob("*.metal") if not args.only or f.stem in args.only)
    if not files:
        print(f"no .metal files under {checkout / args.root}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, ETMETAL_DEVICE="cpu", ETMETAL_CACHE_DIR=cache, ETMETAL_LOG="error",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda f: compile_file(f, checkout, args.timeout, env), files))
    statuses = Counter(r["status"] for r in results)
    for r in results:
        detail = f"{r['kernels']} kernels" if r["status"] == "compiled" else r.get("error", "")
        print(f"{r['status']:9} {r['file']}  {detail}")
    kernels = sum(r.get("kernels", 0) for r in results)
    print(f"\nfiles: {len(files)}, " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
    print(f"kernel instantiations in compiled files: {kernels}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "statuses": dict(statuses), "kernels": kernels},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
