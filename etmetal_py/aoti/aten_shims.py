"""aten ops that torch's generated C shims lack but libetmetal implements: every
`aoti_torch_mps_<op>` a public header declares where `<op>` is an aten op whose default overload
torch 2.13's fallback-op list leaves out (`aten::_fft_c2r`, the inverse real FFT, and
`aten::linalg_solve_triangular`), so Inductor would send it to libtorch's proxy executor, or
lists without an mps shim in torch's c_shim_mps.h (`aten::_pdist_forward`: Inductor would call
a function the generated code has no declaration of). While a program compiles, each is listed
as an Inductor fallback with a C shim, and its declaration goes into the generated code through
`aot_inductor.custom_ops_to_c_shims`; Inductor then calls `aoti_torch_mps_<op>` as it does for
the ops it knows. Declaring the function is all it takes.

Some ops with a C shim have no Meta kernel in torch 2.13 (the histogram ops, CPU-only there), so
Inductor cannot give their outputs shapes on fake mps tensors; while a program compiles they get
one here (see _META_KERNELS)."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from pathlib import Path
from typing import Iterator

import torch

_PREFIX = "aoti_torch_mps_"
# Functions of other namespaces' ops (etmetal_py.ops.c_shims) and torch's own shims.
_OTHER_HEADERS = ("custom_ops.h", "aoti_shim.h", "aoti_shim_mps.h", "etmetal_decls.h")


_lock = threading.Lock()


def _check_histogram_input(self, bins: list, dims: int) -> None:
    """The checks of torch's CPU kernels whose failure would otherwise give wrong shapes; `dims`
    is the number of coordinates per sample."""
    torch._check(self.is_floating_point(),
                 lambda: f"histogram needs a floating-point input, got {self.dtype}")
    torch._check(len(bins) == dims,
                 lambda: "histogramdd: The size of bins must be equal to the innermost dimension "
                         "of the input.")
    for dim, count in enumerate(bins):
        torch._check(count > 0, lambda: f"torch.histogram(): bins must be > 0, but got {count} "
                                        f"for dimension {dim}")


def _check_histogramdd_input(self, bins: list) -> None:
    torch._check(self.dim() >= 2,
                 lambda: "torch.histogramdd: input tensor should have at least 2 dimensions")
    _check_histogram_input(self, bins, self.shape[-1])


def _histogram_bin_ct_meta(self, bins=100, *, range=None, weight=None, density=False):
    _check_histogram_input(self, [bins], 1)
    return self.new_empty((bins,)), self.new_empty((bins + 1,))


def _histogramdd_from_bin_cts_meta(self, bins, *, range=None, weight=None, density=False):
    _check_histogramdd_input(self, bins)
    return self.new_empty(tuple(bins))


def _histogramdd_bin_edges_meta(self, bins, *, range=None, weight=None, density=False):
    _check_histogramdd_input(self, bins)
    return [self.new_empty((count + 1,)) for count in bins]


# Meta kernels shaping outputs as torch's CPU kernels do: counts and edges take the input's
# (floating) dtype; histogramdd's counts are [bins...], its edges one [bins[i] + 1] per dim.
# `aten::_histogramdd_bin_edges` has no C shim: its Meta kernel lets the compile get as far as
# aoti_compile_and_package's proxy check, whose error names it (without one, Inductor fails
# inside histogramdd's decomposition with an unrelated MPS-backend error).
_META_KERNELS = {
    "histogram.bin_ct": _histogram_bin_ct_meta,
    "_histogramdd_from_bin_cts": _histogramdd_from_bin_cts_meta,
    "_histogramdd_bin_edges": _histogramdd_bin_edges_meta,
}


@contextlib.contextmanager
def _meta_kernels() -> Iterator[None]:
    """Registers _META_KERNELS that torch lacks for the duration; removed after, so torch
    outside a compile behaves as shipped (a user's own Meta registration is kept and wins).
    Call it holding _lock."""
    missing = {op: kernel for op, kernel in _META_KERNELS.items()
               if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "Meta")}
    if not missing:
        yield
        return
    library = torch.library.Library("aten", "IMPL")
    try:
        for op, kernel in missing.items():
            library.impl(op, kernel, "Meta")
        yield
    finally:
        library._destroy()


def _torch_mps_shims() -> str:
    """The text of torch's generated c_shim_mps.h, which model code includes ("" if absent)."""
    header = Path(torch.__file__).parent / "include/torch/csrc/inductor/aoti_torch/generated/c_shim_mps.h"
    return header.read_text() if header.exists() else ""


@functools.lru_cache(maxsize=None)
def _aten_op_functions() -> dict:
    """{aten op name: (header, C function)} of the functions described above. Call it holding
    _lock: aten_ops_with_c_shims adds to the fallback-op table it reads."""
    from torchgen.aoti.fallback_ops import inductor_fallback_ops

    from .._ffi import _header_dir
    from ..ops.c_shims import header_declarations

    torch_shims = set(re.findall(r"\b" + _PREFIX + r"\w+", _torch_mps_shims()))
    found = {}
    for header in sorted(path.name for path in _header_dir().glob("*.h")):
        if header in _OTHER_HEADERS:
            continue
        for function in header_declarations(header):
            name = function[len(_PREFIX):] if function.startswith(_PREFIX) else ""
            packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
            if (packet is not None and "default" in packet.overloads()
                    and (f"aten.{name}.default" not in inductor_fallback_ops or function not in torch_shims)):
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
    """Lists the aten ops above in torchgen's fallback-op table and registers the missing Meta
    kernels for the duration (both restored after; compiles in other threads wait)."""
    from torchgen.aoti.fallback_ops import inductor_fallback_ops

    with _lock:
        added = [key for key in (f"aten.{name}.default" for name in _aten_op_functions())
                 if key not in inductor_fallback_ops]
        for key in added:
            inductor_fallback_ops[key] = {}
        try:
            with _meta_kernels():
                yield
        finally:
            for key in added:
                inductor_fallback_ops.pop(key, None)
