"""Helpers of the AOTInductor tests: packages compiled once per session, and the checks that
decide whether this libetmetal can run them yet."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import pytest
import torch

import aoti_models
import etmetal_py
from etmetal_py import ffi, lib
from etmetal_py.aoti import PackageError, aoti_compile_and_package, aoti_load_package, export
from etmetal_py.aoti._symbols import KERNEL_SHIM_FUNCTIONS

_PROBE_KERNEL = b"""
#include <metal_stdlib>
using namespace metal;
kernel void probe(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  out[i] = float(i);
}
"""


@functools.cache
def shader_compiler_error() -> str | None:
    """None when the default device compiles MSL; otherwise its error message."""
    handle = ffi.new("AOTIMetalShaderLibraryHandle*")
    if lib.aoti_torch_mps_create_shader_library(_PROBE_KERNEL, handle) != 0:
        return etmetal_py.last_error()
    lib.aoti_torch_mps_delete_shader_library(handle[0])
    return None


def require_shader_compiler() -> None:
    error = shader_compiler_error()
    if error is not None:
        pytest.skip(f"the {etmetal_py.device_kind()} device cannot compile MSL yet: {error}")


def missing_fallback_ops(message: str) -> list[str]:
    """The fallback-op functions a 'does not export' load error names (none: other error)."""
    if "does not export" not in message:
        return []
    names = message.split("the model needs ", 1)[1].split(", which libetmetal")[0].split(", ")
    if any(name in KERNEL_SHIM_FUNCTIONS or not name.startswith("aoti_torch_mps_")
           for name in names):
        return []
    return names


def load_runner(path: str, **kwargs):
    """Loads a package; skips the test when libetmetal lacks a fallback op it needs."""
    try:
        return aoti_load_package(path, **kwargs)
    except PackageError as exc:
        missing = missing_fallback_ops(str(exc))
        if missing:
            pytest.skip(f"libetmetal does not implement {', '.join(missing)} yet")
        raise


@dataclass
class CompiledCase:
    name: str
    path: str
    model: torch.nn.Module
    case: aoti_models.Case

    def inputs(self, seed: int) -> tuple:
        return self.case.inputs(torch.Generator().manual_seed(seed))

    def expected(self, inputs: tuple):
        with torch.no_grad():
            return self.model(*inputs)


class PackageCache:
    """Compiles each test model the first time a test asks for it."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._compiled: dict[str, CompiledCase] = {}

    def get(self, name: str) -> CompiledCase:
        if name not in self._compiled:
            case = aoti_models.CASES[name]
            torch.manual_seed(0)
            model = case.build().eval()
            example = case.inputs(torch.Generator().manual_seed(1234))
            program = export(model, example, dynamic_shapes=case.dynamic_shapes)
            path = aoti_compile_and_package(program,
                                            package_path=os.path.join(self.folder, f"{name}.pt2"),
                                            **case.compile_options)
            self._compiled[name] = CompiledCase(name, path, model, case)
        return self._compiled[name]


def assert_outputs_close(actual, expected, atol: float, rtol: float) -> None:
    actual_list = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    expected_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert type(actual) is type(expected) or not isinstance(expected, (tuple, list))
    assert len(actual_list) == len(expected_list)
    for index, (got, want) in enumerate(zip(actual_list, expected_list)):
        assert got.dtype == want.dtype, f"output {index}: {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"output {index}: {tuple(got.shape)} != {tuple(want.shape)}"
        assert got.device.type == "cpu"
        if want.dtype.is_floating_point:
            torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol,
                                       msg=lambda m: f"output {index}: {m}")
        else:
            assert torch.equal(got, want), f"output {index} differs"


def allocator_live() -> tuple[int, int]:
    stats = ffi.new("etmetal_allocator_stats_t*")
    etmetal_py.check(lib.etmetal_allocator_stats(stats))
    return stats.live_bytes, stats.live_allocations
