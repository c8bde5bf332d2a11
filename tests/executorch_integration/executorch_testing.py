"""Helpers of the ExecuTorch tests: Metal programs exported once per session, the runtime with
etmetal's backend registered, and rewriting a `.pte` into a damaged one."""

from __future__ import annotations

import os
from typing import Callable

import pytest
import torch

executorch = pytest.importorskip("executorch.exir", reason="needs the etmetal[executorch] extra")

from etmetal_py.executorch import MethodSpec, export_program  # noqa: E402
from etmetal_py.executorch.backend import BackendRegistrationError, register_backend  # noqa: E402


def runtime():
    """ExecuTorch's Python runtime with etmetal's MetalBackend registered (skips when the
    backend library was not built)."""
    try:
        register_backend()
    except BackendRegistrationError as exc:
        pytest.skip(str(exc))
    from executorch.runtime import Runtime

    return Runtime.get()


class LinearNorm(torch.nn.Module):
    """Weights, a reduction and a dynamic leading dimension."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.linear(x))) * 2.0


class TwoOutputs(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 3.0 - 1.0, x.sum(dim=-1)


class Mixed(torch.nn.Module):
    """flip -> linear -> remainder: XNNPACK claims the linear and has neither flip nor
    remainder, so Metal gets two delegates around it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.remainder(self.linear(torch.flip(x, [-1])), 0.75)


BATCH = torch.export.Dim("batch", min=1, max=64)


class ProgramCache:
    """Exports each program once per session."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._paths: dict[str, str] = {}

    def get(self, name: str) -> str:
        if name not in self._paths:
            path = os.path.join(self.directory, name + ".pte")
            builders: dict[str, Callable[[str], str]] = {
                "two_methods": self._two_methods, "mixed": self._mixed}
            self._paths[name] = builders[name](path)
        return self._paths[name]

    @staticmethod
    def _two_methods(path: str) -> str:
        return export_program({
            "forward": MethodSpec(LinearNorm().eval(), (torch.randn(4, 8),),
                                  ({0: BATCH},)),
            "two_outputs": MethodSpec(TwoOutputs(), (torch.randn(3, 5),)),
        }, path)

    @staticmethod
    def _mixed(path: str) -> str:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return export_program({"forward": MethodSpec(Mixed().eval(), (torch.randn(4, 8),))},
                              path, other_partitioners=[XnnpackPartitioner()])


def rewrite_pte(source: str, target: str, change: Callable[[object, dict], None]) -> str:
    """Writes `target`: `source` deserialized, passed to change(program, named_data) where
    named_data maps key -> bytes (edit it in place), and serialized again."""
    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
    from executorch.exir._serialize.data_serializer import DataEntry

    with open(source, "rb") as f:
        pte_file = deserialize_pte_binary(f.read())
    store = pte_file.named_data
    named = {key: bytes(getattr(store.buffers[entry.buffer_index], "buffer",
                                store.buffers[entry.buffer_index]))
             for key, entry in store.pte_data.items()}
    change(pte_file.program, named)
    buffers = list(named.values())
    pte_file.named_data = NamedDataStoreOutput(
        buffers=buffers,
        pte_data={key: DataEntry(buffer_index=i, alignment=1, tensor_layout=None)
                  for i, key in enumerate(named)},
        external_data={})
    with open(target, "wb") as f:
        f.write(bytes(serialize_pte_binary(pte_file, extract_delegate_segments=True)))
    return target
