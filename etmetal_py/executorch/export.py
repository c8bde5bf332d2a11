"""Export Metal `.pte` programs with ExecuTorch's own MetalBackend and MetalPartitioner, on any
host.

ExecuTorch lowers each partition with `AotiBackend.preprocess`: it moves the partition's program
to "mps", compiles it with AOTInductor and stores the model `.so` and its weights blob as named
data. Without an MPS device the move and the compile need etmetal's patches; they are installed
on `MetalBackend` only for the duration of one export, through the two hooks preprocess offers:
`move_program_to_device` (a fake move that keeps the real CPU weights) and
`get_extra_aoti_compile_context_manager` (etmetal's Inductor patches around the compile, fed
with those weights). The `.pte` keeps ExecuTorch's layout exactly; only the `.so` inside is
built for this host.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import torch

from .. import _ffi
from ..aoti._compat import (_AttributePatcher, _patch_lock, check_torch_version,
                            model_links_library, mps_available, mps_compile_patches,
                            resolve_gpu_cores)
from ..aoti.compile import with_current_overloads
from ..aoti.export import (ExportError, _check_model_on_cpu, _cpu_inputs, copy_program,
                           move_program_to_mps, real_constants_of)

METAL_BACKEND_ID = "MetalBackend"


class ExecuTorchUnavailableError(ImportError):
    """The executorch package (the `etmetal[executorch]` extra) is not installed."""


def require_executorch() -> None:
    try:
        import executorch.exir  # noqa: F401
    except ImportError as exc:
        raise ExecuTorchUnavailableError(
            "this needs ExecuTorch: pip install 'etmetal[executorch]' "
            f"(executorch==1.5.1); import failed: {exc}") from None


class MethodSpec(NamedTuple):
    """One method of a program: the module whose forward it runs, example inputs, and
    torch.export dynamic shapes (or None)."""
    model: torch.nn.Module
    example_inputs: Any
    dynamic_shapes: Any = None


@contextlib.contextmanager
def _metal_preprocess_on_this_host(gpu_cores: int) -> Iterator[None]:
    """Lets MetalBackend.preprocess move and compile for "mps" without an MPS device."""
    from executorch.backends.apple.metal.metal_backend import MetalBackend

    moved_constants: list[dict[str, torch.Tensor]] = []

    def move_program_to_device(cls: type, edge_program: Any, device: str,
                               compile_specs: Any) -> Any:
        if torch.device(device).type != "mps":
            raise ExportError(f"MetalBackend asked for device {device!r}; expected mps")
        program = move_program_to_mps(copy_program(edge_program))
        moved_constants.append(real_constants_of(program))
        return program

    def get_extra_aoti_compile_context_manager(cls: type, compile_specs: Any = None) -> Any:
        # preprocess moves a partition, then compiles it: the newest move is the one compiled.
        # The model .so links libetmetal, so it binds to it without libetmetal in the global
        # scope (where it would interpose on libtorch).
        stack = contextlib.ExitStack()
        stack.enter_context(model_links_library(str(_ffi.library_path())))
        stack.enter_context(mps_compile_patches(moved_constants[-1] if moved_constants else {},
                                                gpu_cores))
        return stack

    original_compile_options = MetalBackend.get_aoti_compile_options

    def get_aoti_compile_options(cls: type, compile_specs: Any) -> dict[str, Any]:
        # MetalBackend's C-shim table holds the OpOverloads of its import time; importing
        # etmetal_py.ops (or ExecuTorch's ops) defines metal:: ops again, with new objects.
        options = dict(original_compile_options(compile_specs))
        key = "aot_inductor.custom_ops_to_c_shims"
        options[key] = with_current_overloads(options.get(key) or {})
        return options

    with _patch_lock:
        patcher = _AttributePatcher()
        try:
            patcher.set(MetalBackend, "get_aoti_compile_options",
                        classmethod(get_aoti_compile_options))
            patcher.set(MetalBackend, "move_program_to_device",
                        classmethod(move_program_to_device))
            patcher.set(MetalBackend, "get_extra_aoti_compile_context_manager",
                        classmethod(get_extra_aoti_compile_context_manager))
            yield
        finally:
            patcher.restore()


def lower_methods(methods: Mapping[str, MethodSpec], *, gpu_cores: int | None = None,
                  other_partitioners: Sequence[Any] = ()) -> Any:
    """ExecuTorch's ExecutorchProgramManager for `methods`, every method lowered to Metal.

    `other_partitioners` (ExecuTorch partitioners, e.g. XNNPACK's) claim their ops first; the
    Metal delegates take the rest, one per connected region."""
    check_torch_version()
    require_executorch()
    # Registers torchao's `_linear_fp_act_*` schemas where torchao's macOS library is absent,
    # so that MetalBackend's import of torchao's C-shim table succeeds on any host.
    from .. import ops  # noqa: F401
    from executorch.backends.apple.metal.metal_backend import MetalBackend
    from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not methods:
        raise ValueError("a program needs at least one method")
    cores = resolve_gpu_cores(gpu_cores)
    programs = {}
    partitioners = {}
    with sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        for name, spec in methods.items():
            spec = MethodSpec(*spec)
            if not isinstance(spec.model, torch.nn.Module):
                raise TypeError(f"method {name!r}: expected a torch.nn.Module, "
                                f"got {type(spec.model).__name__}")
            _check_model_on_cpu(spec.model)
            args, kwargs = _cpu_inputs(spec.example_inputs, None)
            try:
                programs[name] = torch.export.export(spec.model, args, kwargs=kwargs or None,
                                                     dynamic_shapes=spec.dynamic_shapes,
                                                     strict=False)
            except Exception as exc:
                raise ExportError(f"method {name!r}: torch.export failed: "
                                  f"{type(exc).__name__}: {exc}") from exc
            partitioners[name] = [*other_partitioners, MetalPartitioner(
                [MetalBackend.generate_method_name_compile_spec(name)])]
        patches = (contextlib.nullcontext() if mps_available()
                   else _metal_preprocess_on_this_host(cores))
        with patches:
            edge = to_edge_transform_and_lower(programs, partitioner=partitioners)
            return edge.to_executorch()


def export_program(methods: Mapping[str, MethodSpec], path: str | os.PathLike, *,
                   gpu_cores: int | None = None, other_partitioners: Sequence[Any] = ()) -> str:
    """Writes a `.pte` with one Metal-lowered method per entry of `methods`; returns its path."""
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"output directory does not exist: {parent}")
    program = lower_methods(methods, gpu_cores=gpu_cores, other_partitioners=other_partitioners)
    with open(path, "wb") as f:
        f.write(program.buffer)
    return path


def export_pte(model: torch.nn.Module, example_inputs: Any, path: str | os.PathLike, *,
               dynamic_shapes: Any = None, method_name: str = "forward",
               gpu_cores: int | None = None) -> str:
    """Export `model` as a Metal `.pte` at `path` (ExecuTorch's MetalBackend layout, with a
    model `.so` for this host); returns the path."""
    return export_program({method_name: MethodSpec(model, example_inputs, dynamic_shapes)},
                          path, gpu_cores=gpu_cores)
