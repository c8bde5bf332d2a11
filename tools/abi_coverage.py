#!/usr/bin/env python3
"""Coverage of torch's AOTInductor C shim headers by libetmetal, as numbers.

Reads the declarations of the installed torch's `c/shim.h`, `c/shim_mps.h` and
`generated/c_shim_mps.h`, and the functions etmetal's own headers declare (its custom ops in
`custom_ops.h` among them), and asks the loaded libetmetal which of them it exports.

    python3 tools/abi_coverage.py               # the table
    python3 tools/abi_coverage.py --missing     # ... and the missing (and refusing) names per header
    python3 tools/abi_coverage.py --json        # machine-readable

A covered function is either implemented or exported only to fail with a clear error (it
cannot exist without libtorch, CUDA or fbgemm): those are the functions etmetal's
`aoti_shim_unavailable.h` declares, and each row says how many of its functions they are.

For `c_shim_mps.h` the "forward" row leaves out what an inference runtime is not asked for:
`*_backward` functions, sparse ones, and the training-only
`_fused_moving_avg_obs_fq_helper_functional`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_HEADERS = ("c/shim.h", "c/shim_mps.h", "generated/c_shim_mps.h")
_TORCH_DECLARATION = re.compile(r"AOTI_TORCH_EXPORT\s+[\w\s\*]+?\b(\w+)\s*\(", re.S)
_ETMETAL_DECLARATION = re.compile(r"ETMETAL_API\s+[\w\s\*]+?\b(\w+)\s*\(", re.S)
_NOT_FORWARD = re.compile(r"(_backward|sparse|^aoti_torch_mps__fused_moving_avg_obs_fq_helper_functional$)")


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def torch_header_dir() -> Path:
    import torch

    return Path(torch.__file__).parent / "include" / "torch" / "csrc" / "inductor" / "aoti_torch"


def torch_functions(header: str) -> list[str]:
    """Function names one torch shim header declares, in order, without duplicates."""
    text = _strip_comments((torch_header_dir() / header).read_text())
    return list(dict.fromkeys(_TORCH_DECLARATION.findall(text)))


def etmetal_header_functions() -> dict[str, list[str]]:
    """{header name: function names} of etmetal's public headers: what the project claims."""
    folder = ROOT / "native" / "include" / "etmetal"
    return {path.name: list(dict.fromkeys(_ETMETAL_DECLARATION.findall(_strip_comments(path.read_text()))))
            for path in sorted(folder.glob("*.h"))}


UNAVAILABLE_HEADER = "aoti_shim_unavailable.h"


def refusing_functions() -> set[str]:
    """The functions etmetal exports only to fail with a clear error."""
    return set(etmetal_header_functions().get(UNAVAILABLE_HEADER, []))


def is_forward(name: str) -> bool:
    return not _NOT_FORWARD.search(name)


def load_library() -> ctypes.CDLL:
    sys.path.insert(0, str(ROOT))
    from etmetal_py._ffi import library_path  # the library etmetal_py would load

    return ctypes.CDLL(str(library_path()), mode=os.RTLD_LOCAL | os.RTLD_NOW)


def exported(library: ctypes.CDLL, names: list[str]) -> list[str]:
    return [name for name in names if hasattr(library, name)]


def coverage(library: ctypes.CDLL) -> dict[str, dict]:
    """{row name: {"total", "covered", "implemented", "refused", "missing"}} for each torch
    header (and the forward part of c_shim_mps.h) and for etmetal's custom ops; "refused" lists
    the covered functions that only fail with a clear error, "implemented" counts the rest."""
    rows: dict[str, list[str]] = {}
    for header in TORCH_HEADERS:
        rows[header.split("/")[-1]] = torch_functions(header)
    rows["c_shim_mps.h (forward)"] = [n for n in rows["c_shim_mps.h"] if is_forward(n)]
    rows["etmetal custom ops"] = etmetal_header_functions().get("custom_ops.h", [])
    refusing = refusing_functions()
    result = {}
    for row, names in rows.items():
        have = set(exported(library, names))
        refused = [n for n in names if n in have and n in refusing]
        result[row] = {"total": len(names), "covered": len(have),
                       "implemented": len(have) - len(refused), "refused": refused,
                       "missing": [n for n in names if n not in have]}
    return result


def claimed_but_missing(library: ctypes.CDLL) -> list[str]:
    """Functions etmetal's public headers declare that the library does not export."""
    return [name for names in etmetal_header_functions().values() for name in names
            if not hasattr(library, name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--missing", action="store_true", help="list the missing functions")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    library = load_library()
    rows = coverage(library)
    claimed = claimed_but_missing(library)
    if args.json:
        print(json.dumps({"coverage": rows, "claimed_but_missing": claimed}, indent=1))
        return 1 if claimed else 0
    width = max(len(row) for row in rows)
    for row, data in rows.items():
        percent = 100.0 * data["covered"] / data["total"] if data["total"] else 100.0
        split = (f"  ({data['implemented']} implemented, {len(data['refused'])} exported, fail with a clear error)"
                 if data["refused"] else "")
        print(f"{row:<{width}}  {data['covered']:>4} / {data['total']:<4} {percent:5.1f}%{split}")
        if args.missing and data["refused"]:
            print("    fail with a clear error: " + ", ".join(data["refused"]))
        if args.missing and data["missing"]:
            print("    missing: " + ", ".join(data["missing"]))
    if claimed:
        print("declared in etmetal's headers but not exported: " + ", ".join(claimed))
    return 1 if claimed else 0


if __name__ == "__main__":
    sys.exit(main())
