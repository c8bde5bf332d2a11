"""Reads the Metal delegates of a `.pte` back: what ExecuTorch's runtime hands the backend."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .export import METAL_BACKEND_ID, require_executorch


@dataclass
class MetalDelegate:
    method: str
    index: int                      # position among the method's delegates
    processed: bytes                # "<so key>\n<weights key>"
    compile_specs: dict[str, bytes]
    named_data: dict[str, bytes] = field(repr=False)  # the keys the processed bytes name

    @property
    def keys(self) -> list[str]:
        return self.processed.decode("utf-8").split("\n") if self.processed else []


def _named_data(pte_file) -> dict[str, bytes]:
    store = pte_file.named_data
    if store is None:
        return {}
    found = {}
    for key, entry in store.pte_data.items():
        buffer = store.buffers[entry.buffer_index]
        found[key] = bytes(getattr(buffer, "buffer", buffer))
    return found


def method_names(path: str | os.PathLike) -> list[str]:
    require_executorch()
    from executorch.exir._serialize._program import deserialize_pte_binary

    with open(path, "rb") as f:
        program = deserialize_pte_binary(f.read()).program
    return [plan.name for plan in program.execution_plan]


def metal_delegates(path: str | os.PathLike) -> list[MetalDelegate]:
    """Every MetalBackend delegate of the program at `path`, in method order."""
    require_executorch()
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import DataLocation

    with open(path, "rb") as f:
        pte_file = deserialize_pte_binary(f.read())
    program = pte_file.program
    named = _named_data(pte_file)
    delegates = []
    for plan in program.execution_plan:
        for index, delegate in enumerate(plan.delegates):
            if delegate.id != METAL_BACKEND_ID:
                continue
            reference = delegate.processed
            if reference.location != DataLocation.INLINE:
                raise ValueError(f"{plan.name}: delegate {index} keeps its processed bytes in "
                                 "a segment; ExecuTorch's MetalBackend writes them inline")
            processed = bytes(program.backend_delegate_data[reference.index].data)
            specs = {spec.key: bytes(spec.value) for spec in delegate.compile_specs}
            keys = processed.decode("utf-8").split("\n") if processed else []
            delegates.append(MetalDelegate(plan.name, index, processed, specs,
                                           {k: named[k] for k in keys if k in named}))
    return delegates
