"""``custom_ops_to_c_shims`` for AOTInductor, read from ``etmetal/custom_ops.h``: the C
declaration Inductor writes into the generated wrapper is the one libetmetal exports, so the
two cannot drift apart."""

from __future__ import annotations

import re

import torch

from .._ffi import _header_dir

HEADER = "custom_ops.h"
_PREFIX = "aoti_torch_mps_"
_DECLARATION = re.compile(r"ETMETAL_API\s+(AOTITorchError\s+(\w+)\s*\(([^;]*?)\))\s*;", re.S)


def header_declarations(header: str = HEADER) -> dict[str, str]:
    """{C function name: one-line declaration} of every function in `header` (custom_ops.h)."""
    text = (_header_dir() / header).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return {name: " ".join(declaration.split()).replace("( ", "(")
            for declaration, name, _ in _DECLARATION.findall(text)}


def op_for_function(name: str) -> torch._ops.OpOverload:
    """The torch op a custom_ops.h function implements: aoti_torch_mps__linear_fp_act_* are
    torchao's, the others are in the ``metal`` namespace."""
    if not name.startswith(_PREFIX):
        raise ValueError(f"{name} is not an aoti_torch_mps_ function")
    op_name = name[len(_PREFIX):]
    namespace = torch.ops.torchao if op_name.startswith("_linear_fp_act_") else torch.ops.metal
    return getattr(namespace, op_name).default


def build_custom_ops_to_c_shims() -> dict:
    """{OpOverload: [C declaration]} for ``aot_inductor.custom_ops_to_c_shims``."""
    return {op_for_function(name): [declaration]
            for name, declaration in header_declarations().items()}
