"""Export a PyTorch model as an ExportedProgram on device "mps", on any host.

Without MPS (Linux, or a Mac without a usable GPU) the model is traced on CPU with
torch.export, and the ExportedProgram is then moved to "mps" with a *fake* move: parameters,
buffers and constants become FakeTensors on "mps" (their real CPU values are kept beside the
program for weight serialization), node metadata moves with them, and `device=` arguments in
the graph are rewritten. Tracing on CPU is what makes slicing, memory formats and every other
op that torch.export supports on CPU work here too.

On a Mac where torch can create "mps" tensors, the model is exported on "mps" directly.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from ._compat import REAL_VALUE_ATTR, check_torch_version, mps_available, quiet_treespec_deprecation
from ._mps_guard import ensure_mps_device_guard

# Fake tensors report the indexed device; graph arguments must say the same.
MPS = torch.device("mps", 0)

# Name of the ExportedProgram attribute that holds {graph attribute name: real CPU tensor}
# for every fake "mps" constant of a program moved by `move_program_to_mps`.
REAL_CONSTANTS_ATTR = "_etmetal_real_constants"


class ExportError(RuntimeError):
    """The model could not be exported for "mps"."""


def _as_cpu_tensor(value: Any, where: str) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ExportError(f"{where} is on device {value.device}; pass CPU tensors")
        return value
    return value


def _cpu_inputs(args: Any, kwargs: Any) -> tuple[tuple, dict]:
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    kwargs = dict(kwargs or {})
    args = tuple(pytree.tree_map(lambda v: _as_cpu_tensor(v, "an example input"), a) for a in args)
    kwargs = {k: pytree.tree_map(lambda v: _as_cpu_tensor(v, f"example input {k!r}"), v)
              for k, v in kwargs.items()}
    return args, kwargs


def _check_model_on_cpu(model: torch.nn.Module) -> None:
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.device.type not in ("cpu", "meta"):
            raise ExportError(f"model tensor {name!r} is on {tensor.device}; "
                              "build the model on CPU (it is moved to \"mps\" when exported)")
        if tensor.device.type == "meta":
            raise ExportError(f"model tensor {name!r} is on the meta device; "
                              "real weights are needed")


def _fake_mode_of(ep: ExportedProgram) -> Any:
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    values = [node.meta.get("val") for node in ep.graph.nodes if node.op == "placeholder"]
    leaves = [v for v in pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]
    return detect_fake_mode(leaves) or FakeTensorMode(allow_non_fake_inputs=True)


def _standalone_copy(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself when it owns exactly its storage; otherwise a copy that does.

    Inductor serializes a constant's whole storage and records its storage offset, so a view
    into a larger storage (a slice of another weight) must become its own tensor.
    """
    tensor = tensor.detach()
    tight = tensor.numel() * tensor.element_size()
    if tensor.storage_offset() == 0 and tensor.untyped_storage().nbytes() == tight:
        return tensor
    # Keeps the strides of a dense tensor; an expanded (overlapping) one becomes contiguous.
    return tensor.clone(memory_format=torch.preserve_format)


def program_device_types(ep: ExportedProgram) -> set[str]:
    """Device types of the program's parameters, buffers, constants and placeholder values."""
    types: set[str] = set()
    for value in list(ep.state_dict.values()) + list(ep.constants.values()):
        if isinstance(value, torch.Tensor):
            types.add(value.device.type)
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            for leaf in pytree.tree_leaves(node.meta.get("val")):
                if isinstance(leaf, torch.Tensor):
                    types.add(leaf.device.type)
    return types


def real_constants_of(ep: ExportedProgram) -> dict[str, torch.Tensor]:
    """Real CPU values behind the fake "mps" constants of a program this module moved."""
    return dict(getattr(ep, REAL_CONSTANTS_ATTR, None) or {})


def move_program_to_mps(ep: ExportedProgram) -> ExportedProgram:
    """Move a CPU ExportedProgram to "mps" in place, with fake tensors; returns `ep`."""
    from torch._subclasses.fake_tensor import FakeTensor

    ensure_mps_device_guard()
    fake_mode = _fake_mode_of(ep)
    real_constants: dict[str, torch.Tensor] = {}

    def fake_on_mps(real: torch.Tensor) -> torch.Tensor:
        return FakeTensor(fake_mode, real.to("meta"), MPS)

    def move_value(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or value.device.type == "mps":
            return value
        if isinstance(value, FakeTensor):
            # no_grad: autograd metadata for an "mps" tensor asks for a device guard, which
            # this build does not have (the process would terminate).
            with value.fake_mode, torch.no_grad():
                return torch.ops.aten._to_copy.default(value.detach(), device=MPS)
        return fake_on_mps(value.detach())  # an example input: same sizes and strides

    with torch.no_grad():
        for name, value in list(ep.state_dict.items()):
            if isinstance(value, FakeTensor):
                moved = move_value(value)
            else:
                real = _standalone_copy(value)
                real_constants[name] = real
                moved = fake_on_mps(real)
            if isinstance(value, torch.nn.Parameter):
                moved = torch.nn.Parameter(moved, requires_grad=False)
            ep._state_dict[name] = moved
        for name, value in list(ep.constants.items()):
            if not isinstance(value, torch.Tensor):
                continue
            if isinstance(value, FakeTensor):
                ep._constants[name] = move_value(value)
            else:
                real = _standalone_copy(value)
                real_constants[name] = real
                moved = fake_on_mps(real)
                # A tensor constant created in forward() reaches Inductor under a name of its
                # own (_tensor_constant0): the fake carries its real value along.
                setattr(moved, REAL_VALUE_ATTR, real)
                ep._constants[name] = moved
        if ep.example_inputs is not None:
            ep._example_inputs = pytree.tree_map_only(torch.Tensor, move_value, ep.example_inputs)
        for module in ep.graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                _retarget_node_device(node)
                if "val" in node.meta:
                    node.meta["val"] = pytree.tree_map(move_value, node.meta["val"])
            module.recompile()
    # No ep.validate(): it indexes tensors, which takes a device guard "mps" lacks here.
    setattr(ep, REAL_CONSTANTS_ATTR, real_constants)
    return ep


def _retarget_node_device(node: torch.fx.Node) -> None:
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != "mps":
        node.kwargs = {**node.kwargs, "device": MPS}
    if (node.op == "call_function" and node.target is torch.ops.aten.to.device
            and len(node.args) > 1):
        args = list(node.args)
        args[1] = MPS
        node.args = tuple(args)


def copy_program(ep: ExportedProgram) -> ExportedProgram:
    """A copy of `ep` whose graph can be changed without touching `ep`; tensors are shared."""
    memo: dict[int, Any] = {}
    for value in list(ep.state_dict.values()) + list(ep.constants.values()):
        if isinstance(value, torch.Tensor):
            memo[id(value)] = value
    if ep.example_inputs is not None:
        for leaf in pytree.tree_leaves(ep.example_inputs):
            if isinstance(leaf, torch.Tensor):
                memo[id(leaf)] = leaf
    with quiet_treespec_deprecation():
        duplicate = copy.deepcopy(ep, memo)
    # The copies of the dictionaries must be new so that moving one program leaves the other.
    duplicate._state_dict = dict(duplicate.state_dict)
    duplicate._constants = dict(duplicate.constants)
    return duplicate


def unserializable_output_types(ep: ExportedProgram) -> list[str]:
    """Output containers AOTInductor cannot serialize into the package's call spec: torch's
    structseq return types (torch.return_types.topk, .sort, .max, ...) have no pytree
    serialization name, so a program returning one fails to compile (stock torch too)."""
    found: list[str] = []
    pending = [ep.call_spec.out_spec] if ep.call_spec.out_spec is not None else []
    while pending:
        spec = pending.pop()
        kind = getattr(spec, "type", None)
        if kind is not None and getattr(kind, "__module__", "") == "torch.return_types":
            name = f"torch.return_types.{kind.__name__}"
            if name not in found:
                found.append(name)
        pending.extend(getattr(spec, "children_specs", None) or [])
    return found


def check_output_types(ep: ExportedProgram, error: type = RuntimeError) -> None:
    found = unserializable_output_types(ep)
    if found:
        raise error(
            f"the model returns {', '.join(found)}, which AOTInductor cannot store in a package "
            "(no pytree serialization; stock torch AOTI fails the same way). Return the fields "
            "as a plain tuple instead, e.g. `values, indices = torch.topk(x, k); "
            "return values, indices`")


def export(model: torch.nn.Module, args: Any, kwargs: Mapping[str, Any] | None = None,
           dynamic_shapes: Any = None, *, strict: bool = False) -> ExportedProgram:
    """Export `model` for device "mps" with its real weights.

    `args` / `kwargs` are example inputs (CPU torch tensors or numpy arrays); `dynamic_shapes`
    is passed to torch.export.export unchanged. The model itself is not modified.
    """
    check_torch_version()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"export() needs a torch.nn.Module, got {type(model).__name__}")
    args, kwargs = _cpu_inputs(args, kwargs)
    _check_model_on_cpu(model)
    if mps_available():
        ep = _export_on_real_mps(model, args, kwargs, dynamic_shapes, strict)
        check_output_types(ep, ExportError)
        return ep
    try:
        ep = torch.export.export(model, args, kwargs=kwargs or None,
                                 dynamic_shapes=dynamic_shapes, strict=strict)
    except Exception as exc:
        raise ExportError(f"torch.export failed on CPU: {type(exc).__name__}: {exc}") from exc
    check_output_types(ep, ExportError)
    return move_program_to_mps(ep)


def _export_on_real_mps(model: torch.nn.Module, args: tuple, kwargs: dict,
                        dynamic_shapes: Any, strict: bool) -> ExportedProgram:
    on_mps = copy.deepcopy(model).to(MPS)
    to_mps = lambda t: t.to(MPS)  # noqa: E731
    args = pytree.tree_map_only(torch.Tensor, to_mps, args)
    kwargs = pytree.tree_map_only(torch.Tensor, to_mps, kwargs)
    try:
        return torch.export.export(on_mps, args, kwargs=kwargs or None,
                                   dynamic_shapes=dynamic_shapes, strict=strict)
    except Exception as exc:
        raise ExportError(f"torch.export failed on mps: {type(exc).__name__}: {exc}") from exc
