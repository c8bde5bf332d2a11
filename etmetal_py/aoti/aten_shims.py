"""aten ops that torch's generated C shims lack but libetmetal implements: every
`aoti_torch_mps_<op>` a public header declares where `<op>` is an aten op whose default overload
torch 2.13's fallback-op list leaves out (`aten::_fft_c2r`, the inverse real FFT, and
`aten::linalg_solve_triangular`), so Inductor would send it to libtorch's proxy executor. While a
program compiles, each is listed as an Inductor fallback with a C shim, and its declaration goes
into the generated code through `aot_inductor.custom_ops_to_c_shims`; Inductor then calls
`aoti_torch_mps_<op>` as it does for the ops it knows. Declaring the function is all it takes."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Iterator

import torch

_PREFIX = "aoti_torch_mps_"
# Functions of other namespaces' ops (etmetal_py.ops.c_shims) and torch's own shims.
_OTHER_HEADERS = ("custom_ops.h", "aoti_shim.h", "aoti_shim_mps.h", "etmetal_decls.h")


_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _aten_op_functions() -> dict:
    """{aten op name: (header, C function)} of the functions described above. Call it holding
    _lock: aten_ops_with_c_shims adds to the fallback-op table it reads."""
    from torchgen.aoti.fallback_ops import inductor_fallback_ops

    from .._ffi import _header_dir
    from ..ops.c_shims import header_declarations

    found = {}
    for header in sorted(path.name for path in _header_dir().glob("*.h")):
        if header in _OTHER_HEADERS:
            continue
        for function in header_declarations(header):
            name = function[len(_PREFIX):] if function.startswith(_PREFIX) else ""
            packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
            if (packet is not None and "default" in packet.overloads()
                    and f"aten.{name}.default" not in inductor_fallback_ops):
                found[name] = (header, function)
    return found


def aten_op_c_shims() -> dict:
    """{OpOverload: [C declaration]} of the aten ops above."""
    from ..ops.c_shims import header_declarations

    with _lock:
        functions = _aten_op_functions()
    return {getattr(torch.ops.aten, name).default: [header_declarations(header)[function]]
            for name, (header, function) in functions.items()}


@contextlib.contextmanager
def aten_ops_with_c_shims() -> Iterator[None]:
    """Lists the aten ops above in torchgen's fallback-op table for the duration (restored
    after; compiles in other threads wait)."""
    from torchgen.aoti.fallback_ops import inductor_fallback_ops

    with _lock:
        added = [key for key in (f"aten.{name}.default" for name in _aten_op_functions())
                 if key not in inductor_fallback_ops]
        for key in added:
            inductor_fallback_ops[key] = {}
        try:
            yield
        finally:
            for key in added:
                inductor_fallback_ops.pop(key, None)
