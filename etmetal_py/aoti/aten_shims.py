"""aten ops that torch's generated C shims lack but libetmetal implements (declared in
etmetal/fallback_spectral.h): `aten::_fft_c2r`, the inverse real FFT (torch.fft.irfft and
friends), has no entry in torch 2.13's fallback-op list, so Inductor would send it to libtorch's
proxy executor. While a program compiles, it is listed as an Inductor fallback with a C shim,
and its declaration goes into the generated code through `aot_inductor.custom_ops_to_c_shims`;
Inductor then calls `aoti_torch_mps_<op>` as it does for the ops it knows."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

# {aten op name (default overload): (header, C function)}.
_ATEN_OP_FUNCTIONS = {
    "_fft_c2r": ("fallback_spectral.h", "aoti_torch_mps__fft_c2r"),
}
_lock = threading.Lock()


def aten_op_c_shims() -> dict:
    """{OpOverload: [C declaration]} of the aten ops above."""
    from ..ops.c_shims import header_declarations

    return {getattr(torch.ops.aten, name).default: [header_declarations(header)[function]]
            for name, (header, function) in _ATEN_OP_FUNCTIONS.items()}


@contextlib.contextmanager
def aten_ops_with_c_shims() -> Iterator[None]:
    """Lists the aten ops above in torchgen's fallback-op table for the duration (restored
    after; compiles in other threads wait)."""
    from torchgen.aoti.fallback_ops import inductor_fallback_ops

    with _lock:
        added = [key for key in (f"aten.{name}.default" for name in _ATEN_OP_FUNCTIONS)
                 if key not in inductor_fallback_ops]
        for key in added:
            inductor_fallback_ops[key] = {}
        try:
            yield
        finally:
            for key in added:
                inductor_fallback_ops.pop(key, None)
