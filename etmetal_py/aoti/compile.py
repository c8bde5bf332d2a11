"""AOT-compile an "mps" ExportedProgram into a .pt2 package with stock Inductor.

The package's model .so does not link libtorch (`aot_inductor.link_libtorch=False`); it links
libetmetal, which provides its `aoti_torch_*` functions (see runner.py for how it binds).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import zipfile
from typing import Any, Mapping

import torch
from torch.export import ExportedProgram

from .. import _ffi
from ._compat import (check_torch_version, model_links_library, mps_available, mps_compile_patches,
                      resolve_gpu_cores)
from ._mps_guard import ensure_mps_device_guard
from .aten_shims import aten_op_c_shims, aten_ops_with_c_shims
from .export import (check_output_types, copy_program, move_program_to_mps, program_device_types,
                     real_constants_of)


class CompileError(RuntimeError):
    """AOTInductor could not compile the program for "mps"."""


# Settings every etmetal package needs; a user config may not contradict them.
_REQUIRED_CONFIGS = {"aot_inductor.link_libtorch": False}
_SUPPORTED_WEIGHT_FORMATS = (None, "binary_blob")
# Defaults a user config may change.
# layout_optimization: Inductor's channels-last choice for convolution nets (its heuristic
# weighs cuDNN timings) gains nothing here: libetmetal's convolution reads any strides and
# returns a contiguous result, so the choice only adds copies, among them a permute of every
# convolution weight at every run (resnet18 at 64x64 on the CPU device: a third of its time).
_DEFAULT_CONFIGS = {"layout_optimization": False}


def custom_op_c_shims() -> dict:
    """C-shim declarations of etmetal's custom ops, when `etmetal_py.ops` provides them.

    The hook: `etmetal_py.ops.custom_ops_to_c_shims` is either a dict
    {OpOverload: [C declaration, ...]} or a function returning one.
    """
    try:
        ops = importlib.import_module("etmetal_py.ops")
    except ModuleNotFoundError as exc:
        if exc.name in ("etmetal_py.ops", "etmetal_py"):
            return {}
        raise
    shims = getattr(ops, "custom_ops_to_c_shims", None)
    if shims is None:
        return {}
    if callable(shims):
        shims = shims()
    if not isinstance(shims, Mapping):
        raise CompileError("etmetal_py.ops.custom_ops_to_c_shims must be a dict "
                           f"(or return one), got {type(shims).__name__}")
    return dict(shims)


# Other libraries' ops that libetmetal implements: {(namespace, op name): C function}, declared
# in etmetal/fallback_experts.h. Registered when the op exists (its library was imported).
_FOREIGN_OP_FUNCTIONS = {
    ("transformers", "grouped_mm_fallback"): "aoti_torch_mps_grouped_mm_fallback",
}


def foreign_op_c_shims() -> dict:
    """C-shim declarations of the registered foreign ops libetmetal implements."""
    from ..ops.c_shims import header_declarations

    declarations = header_declarations("fallback_experts.h")
    shims = {}
    for (namespace, name), function in _FOREIGN_OP_FUNCTIONS.items():
        if torch._C._dispatch_has_kernel(f"{namespace}::{name}"):
            shims[getattr(getattr(torch.ops, namespace), name).default] = [declarations[function]]
    return shims


def current_overload(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """The overload registered now under `op`'s name. Defining an op again (ExecuTorch's
    Metal backend defines ``metal::gather_qmv`` and ``metal::gated_delta_rule`` too) makes new
    OpOverload objects, and Inductor finds C shims by identity."""
    namespace, name = op._schema.name.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), name), op._overloadname)


def with_current_overloads(shims: Mapping) -> dict:
    """`shims` ({OpOverload: [C declaration]}) keyed by the overloads registered now."""
    return {current_overload(op) if isinstance(op, torch._ops.OpOverload) else op: declarations
            for op, declarations in shims.items()}


def build_inductor_configs(inductor_configs: Mapping[str, Any] | None,
                           external_weights: bool) -> dict[str, Any]:
    configs: dict[str, Any] = dict(_DEFAULT_CONFIGS)
    if external_weights:
        configs["aot_inductor.package_constants_in_so"] = False
        configs["aot_inductor.package_constants_on_disk_format"] = "binary_blob"
    configs.update(inductor_configs or {})
    for key, required in _REQUIRED_CONFIGS.items():
        if key in configs and configs[key] != required:
            raise ValueError(f"{key}={configs[key]!r} is not supported: etmetal packages "
                             f"need {key}={required!r} (libetmetal provides the shim ABI)")
        configs[key] = required
    weight_format = configs.get("aot_inductor.package_constants_on_disk_format")
    if weight_format not in _SUPPORTED_WEIGHT_FORMATS:
        raise ValueError(f"aot_inductor.package_constants_on_disk_format={weight_format!r} "
                         "is not supported; use None (weights in the .so) or 'binary_blob'")
    if configs.get("aot_inductor.package_constants_in_so", True) is False \
            and weight_format is None:
        raise ValueError("aot_inductor.package_constants_in_so=False needs "
                         "aot_inductor.package_constants_on_disk_format='binary_blob'; "
                         "otherwise the package holds no weights")
    shims = dict(custom_op_c_shims())
    shims.update(foreign_op_c_shims())
    shims.update(aten_op_c_shims())
    shims.update(configs.get("aot_inductor.custom_ops_to_c_shims") or {})
    if shims:
        configs["aot_inductor.custom_ops_to_c_shims"] = with_current_overloads(shims)
    return configs


def _failing_node(exc: BaseException) -> torch.fx.Node | None:
    """The innermost FX node being processed when `exc` was raised, if any."""
    found = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            for value in frame.f_locals.values():
                if isinstance(value, torch.fx.Node) and value.op == "call_function":
                    found = value
        current = current.__cause__ or current.__context__
    return found


def _root_cause(exc: BaseException) -> BaseException:
    inner = getattr(exc, "inner_exception", None)
    while inner is not None:
        exc = inner
        inner = getattr(exc, "inner_exception", None)
    return exc


def describe_compile_failure(exc: BaseException) -> str:
    cause = _root_cause(exc)
    text = str(cause).strip()
    # Inductor appends long argument dumps and stack traces; the first lines carry the reason.
    lines = [line for line in text.splitlines() if line.strip()]
    reason = " ".join(lines[:3]) if lines else type(cause).__name__
    message = f"{type(cause).__name__}: {reason}"
    node = _failing_node(exc)
    if node is not None and str(node.target) not in message:
        message = f"while compiling op {node.target} (node {node.name}): {message}"
    return message


def _check_codesign_available() -> None:
    if sys.platform != "darwin":
        raise ValueError("codesign_identity is only supported on macOS")
    if shutil.which("codesign") is None:
        raise ValueError("codesign_identity given but the codesign tool is not installed")


def _sign_package_libraries(package_path: str, identity: str) -> None:
    """Sign every .so inside the package with `codesign -f -s identity` (macOS only)."""
    with tempfile.TemporaryDirectory(prefix="etmetal-sign-") as work:
        rewritten = os.path.join(work, "signed.pt2")
        with zipfile.ZipFile(package_path) as source, \
                zipfile.ZipFile(rewritten, "w", zipfile.ZIP_STORED) as target:
            for info in source.infolist():
                data = source.read(info)
                if info.filename.endswith(".so"):
                    library = os.path.join(work, "model.so")
                    with open(library, "wb") as f:
                        f.write(data)
                    result = subprocess.run(["codesign", "-f", "-s", identity, library],
                                            capture_output=True, text=True)
                    if result.returncode != 0:
                        raise CompileError(f"codesign failed for {info.filename}: "
                                           f"{result.stderr.strip() or result.stdout.strip()}")
                    with open(library, "rb") as f:
                        data = f.read()
                target.writestr(info, data)
        shutil.move(rewritten, package_path)


SIGNATURE_FILE = "etmetal/signature.json"


def _dimension_range(ep: ExportedProgram, size: Any) -> list[int | None] | None:
    """[min, max] of a symbolic size from the program's range constraints (None: unbounded)."""
    expr = getattr(getattr(size, "node", None), "expr", None)
    constraint = ep.range_constraints.get(expr) if expr is not None else None
    if constraint is None:
        return None

    def bound(value: Any) -> int | None:
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError, AttributeError):
            return None  # unbounded (sympy's int_oo cannot even be rounded: AttributeError)
        return number if abs(number) < 2**62 else None

    return [bound(constraint.lower), bound(constraint.upper)]


def _tensor_signature(ep: ExportedProgram, value: torch.Tensor) -> dict[str, Any]:
    shape = [int(s) if isinstance(s, int) else None for s in value.shape]
    ranges = {str(dim): _dimension_range(ep, s) for dim, s in enumerate(value.shape)
              if not isinstance(s, int)}
    strides = [int(s) for s in value.stride()] if all(isinstance(s, int) for s in value.stride()) \
        and None not in shape else None
    return {"dtype": str(value.dtype).removeprefix("torch."), "shape": shape,
            "strides": strides, "ranges": {k: v for k, v in ranges.items() if v is not None}}


def program_signature(ep: ExportedProgram, gpu_cores: int) -> dict[str, Any]:
    """What the runner checks inputs against: dtype, shape (None for dynamic sizes, with the
    exported range) and the strides the compiled code assumes, per flat tensor input."""
    placeholders = {node.name: node for node in ep.graph.nodes if node.op == "placeholder"}
    inputs = []
    for name in ep.graph_signature.user_inputs:
        node = placeholders.get(name)
        value = node.meta.get("val") if node is not None else None
        if isinstance(value, torch.Tensor):
            inputs.append(_tensor_signature(ep, value))
    from torch.export.graph_signature import OutputKind

    output_node = next(node for node in ep.graph.nodes if node.op == "output")
    outputs = []
    for spec, node in zip(ep.graph_signature.output_specs, output_node.args[0]):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if spec.kind == OutputKind.USER_OUTPUT and isinstance(value, torch.Tensor):
            outputs.append(_tensor_signature(ep, value))
    return {"format": 1, "torch": torch.__version__, "gpu_cores": gpu_cores,
            "inputs": inputs, "outputs": outputs}


def _add_signature(package_path: str, signature: dict[str, Any]) -> None:
    with zipfile.ZipFile(package_path, "a") as archive:
        names = archive.namelist()
        root = names[0].split("/")[0] if names else "model"
        archive.writestr(f"{root}/{SIGNATURE_FILE}", json.dumps(signature, indent=1))


_PROXY_CALL = re.compile(r"aoti_torch_proxy_executor_call_function\(\s*\w+\s*,\s*(\d+)")
_SOURCE_OPS = re.compile(r"Original ATen: \[([^\]]*)\]")


def _extern_node_targets(archive: zipfile.ZipFile, wrapper: str) -> list[str]:
    """Targets of the extern kernel nodes a wrapper calls by index through the proxy executor
    (Inductor serializes them next to the wrapper source, as <wrapper>.json)."""
    name = wrapper[:-len(".cpp")] + ".json"
    if name not in archive.namelist():
        return []
    try:
        nodes = json.loads(archive.read(name)).get("nodes", [])
        return [str(node["node"]["target"]) for node in nodes]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def ops_needing_proxy_executor(package_path: str) -> list[str]:
    """Ops the package's wrapper calls through libtorch's proxy executor (no C shim)."""
    found: list[str] = []
    with zipfile.ZipFile(package_path) as archive:
        for name in archive.namelist():
            if not name.endswith(".wrapper.cpp"):
                continue
            source = archive.read(name).decode("utf-8", "replace")
            targets = _extern_node_targets(archive, name)
            for call in _PROXY_CALL.finditer(source):
                index = int(call.group(1))
                if index < len(targets):
                    op = targets[index]
                else:  # no serialized node: the ops of the fused block, from the comment
                    comments = _SOURCE_OPS.findall(source, 0, call.start())
                    op = comments[-1].strip() if comments else "an unnamed op"
                if op not in found:
                    found.append(op)
    return found


def _program_for_mps(ep: ExportedProgram) -> ExportedProgram:
    devices = program_device_types(ep)
    if devices <= {"mps"}:
        return ep
    if devices <= {"cpu"}:
        return move_program_to_mps(copy_program(ep))
    raise CompileError(f"the program mixes devices {sorted(devices)}; export it with "
                       "etmetal_py.export (on CPU tensors)")


def aoti_compile_and_package(ep: ExportedProgram, package_path: str | os.PathLike | None = None,
                             inductor_configs: Mapping[str, Any] | None = None, *,
                             external_weights: bool = False, gpu_cores: int | None = None,
                             codesign_identity: str | None = None,
                             keep_temps: bool = False) -> str:
    """Compile `ep` for device "mps" with AOTInductor and write a .pt2 package.

    `ep` comes from `etmetal_py.export` (or is a CPU program, moved here). Weights go into the
    model .so unless `external_weights` is set (or the configs ask for it): then they are a
    separate binary blob in the package. `gpu_cores` (default $ETMETAL_GPU_CORES, else 10)
    shapes the generated reductions. With `keep_temps`, a package that fails a check after
    Inductor wrote it (an op without a C shim) is kept for inspection. Returns the package
    path.
    """
    check_torch_version()
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"aoti_compile_and_package() needs an ExportedProgram, "
                        f"got {type(ep).__name__}")
    if package_path is not None:
        package_path = os.fspath(package_path)
        if not package_path.endswith(".pt2"):
            raise ValueError(f"package path must end in .pt2: {package_path!r}")
        parent = os.path.dirname(os.path.abspath(package_path))
        if not os.path.isdir(parent):
            raise ValueError(f"package directory does not exist: {parent}")
    if codesign_identity:
        _check_codesign_available()
    cores = resolve_gpu_cores(gpu_cores)
    configs = build_inductor_configs(inductor_configs, external_weights)
    if ep.example_inputs is None:
        raise ValueError("the program has no example inputs; export it with etmetal_py.export")
    check_output_types(ep, CompileError)
    program = _program_for_mps(ep)
    real_constants = real_constants_of(program)
    try:
        with model_links_library(str(_ffi.library_path())), aten_ops_with_c_shims():
            if mps_available() and not real_constants:
                # A program exported on a real MPS device holds real weights: no patches needed.
                result = torch._inductor.aoti_compile_and_package(
                    program, package_path=package_path, inductor_configs=configs)
            else:
                ensure_mps_device_guard()
                with mps_compile_patches(real_constants, cores):
                    result = torch._inductor.aoti_compile_and_package(
                        program, package_path=package_path, inductor_configs=configs)
    except Exception as exc:
        raise CompileError("AOTInductor could not compile the program for mps: "
                           + describe_compile_failure(exc)) from exc
    if isinstance(result, str):
        proxied = ops_needing_proxy_executor(result)
        if proxied:
            if keep_temps:
                kept = f"the package is kept at {result}"
            else:
                os.remove(result)
                kept = "pass keep_temps=True to keep the package for inspection"
            plural = "s" if len(proxied) > 1 else ""
            raise CompileError(
                f"op{plural} {', '.join(proxied)} ha{'ve' if plural else 's'} no C shim for mps: "
                "AOTInductor would call it through libtorch's proxy executor, which etmetal "
                "packages cannot use. Register a C shim for it (etmetal_py.ops: "
                "aot_inductor.custom_ops_to_c_shims, and the function in libetmetal), or choose "
                f"an implementation that uses ops with an mps C shim; {kept}")
        _add_signature(result, program_signature(program, cores))
        if codesign_identity:
            _sign_package_libraries(result, codesign_identity)
    return result

