"""Compatibility patches that let stock Inductor (torch 2.13) compile for device "mps" on a host
without an MPS device.

Everything here is scoped: `mps_compile_patches()` installs the patches, yields, and restores
every patched attribute on exit (also on error). A process-wide re-entrant lock serializes
patched sections, so two threads never see each other's half-installed state.

Why each patch exists (measured with torch 2.13.0+cpu):
- `joint_graph.lazy_init` traces replacement patterns with real tensors on the input device;
  real "mps" tensors cannot be created without MPS, so trace the patterns on CPU.
- `get_gpu_type()` answers "cuda" when no GPU is available, and the C++ wrapper then emits
  CUDA types. Several modules import it by name, so each binding is replaced.
- `torch.backends.mps.get_core_count()` is absent without MPS; reductions use it to choose
  split counts, so it is the configurable `gpu_cores`.
- Fake constants all have `data_ptr() == 0`; Inductor's constant de-duplication would merge
  distinct same-shape constants. Fakes are compared by identity instead.
- Serializing constants reads real storage: while `AotCodeCompiler.compile` serializes, the
  real CPU tensors (by name) are handed out instead of the fake "mps" ones.
- Tiny 1-D constants are inlined through `tolist()`, and 0-dim ones through `.item()`, which
  fake tensors cannot answer: tiny ones stay constants, 0-dim ones inline the real value.
- `aten.scaled_dot_product_attention` asks a dispatch stub with no "mps" slot: a
  Python-dispatcher kernel picks what torch on macOS picks for the math backend.
- The uniform-value constant folder runs constructors for real on the node's device:
  they run on CPU instead (the replacement node still takes "mps" from its metadata).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from typing import Any, Callable, Iterator, Mapping

import torch

SUPPORTED_TORCH_MINOR = (2, 13)
DEFAULT_GPU_CORES = 10
GPU_CORES_ENV = "ETMETAL_GPU_CORES"

# Re-entrant: export may run inside a compile section (a CPU program is moved on the fly).
_patch_lock = threading.RLock()


class UnsupportedTorchError(RuntimeError):
    """The installed torch is not the version these patches were written against."""


def torch_version_tuple() -> tuple[int, int]:
    base = torch.__version__.split("+")[0]
    parts = base.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def check_torch_version() -> None:
    if torch_version_tuple() != SUPPORTED_TORCH_MINOR:
        raise UnsupportedTorchError(
            f"etmetal's AOTInductor support needs torch "
            f"{SUPPORTED_TORCH_MINOR[0]}.{SUPPORTED_TORCH_MINOR[1]}.x; "
            f"found torch {torch.__version__}")


def resolve_gpu_cores(gpu_cores: int | None) -> int:
    """The GPU core count Inductor should assume: argument, else $ETMETAL_GPU_CORES, else 10."""
    if gpu_cores is None:
        text = os.environ.get(GPU_CORES_ENV, "").strip()
        if not text:
            return DEFAULT_GPU_CORES
        try:
            gpu_cores = int(text)
        except ValueError:
            raise ValueError(f"{GPU_CORES_ENV}={text!r} is not an integer") from None
    if isinstance(gpu_cores, bool) or not isinstance(gpu_cores, int) or gpu_cores < 1:
        raise ValueError(f"gpu_cores must be a positive integer, got {gpu_cores!r}")
    return gpu_cores


def mps_available() -> bool:
    """True when this torch can create real "mps" tensors (a Mac with MPS)."""
    try:
        return bool(torch.backends.mps.is_available())
    except Exception:
        return False


class _AttributePatcher:
    """Sets attributes and puts the previous values back, newest first."""

    _MISSING = object()

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, self._MISSING)
                            if isinstance(owner, type) else getattr(owner, name, self._MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        while self._saved:
            owner, name, previous = self._saved.pop()
            if previous is self._MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, previous)


# The attribute of a fake "mps" constant that holds its real CPU value.
REAL_VALUE_ATTR = "_etmetal_real_value"


class RealConstants:
    """Real CPU values of the fake "mps" constants of one program, by graph attribute name."""

    def __init__(self, by_name: Mapping[str, torch.Tensor] | None = None) -> None:
        self._by_name: dict[str, torch.Tensor] = dict(by_name or {})

    def lookup(self, name: str | None) -> torch.Tensor | None:
        if name is None:
            return None
        found = self._by_name.get(name)
        if found is None:
            # Inductor sees lifted attributes with dots turned into underscores.
            found = self._by_name.get(name.replace(".", "_"))
        return found

    def __len__(self) -> int:
        return len(self._by_name)


def _is_fake(value: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(value, FakeTensor)


def _is_mps_device(device: Any) -> bool:
    if device is None:
        return False
    try:
        return torch.device(device).type == "mps"
    except (RuntimeError, TypeError):
        return False


# Modules that bind `get_gpu_type` by name; imported before patching so that a lazy import
# during compilation cannot bind the original afterwards.
_MODULES_BINDING_GPU_TYPE = (
    "torch._inductor.utils",
    "torch._inductor.fx_passes.joint_graph",
    "torch._inductor.fx_passes.post_grad",
    "torch._inductor.codegen.cpp_wrapper_gpu",
    "torch._inductor.autotune_process",
)


def _patch_gpu_type(patcher: _AttributePatcher) -> None:
    import importlib

    for module_name in _MODULES_BINDING_GPU_TYPE:
        importlib.import_module(module_name)
    import torch._inductor.utils as inductor_utils

    original = inductor_utils.get_gpu_type

    def get_gpu_type() -> str:
        return "mps"

    # Modules bind the function by name at import; replace every binding that is loaded.
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "") or ""
        if not name.startswith("torch."):
            continue
        if module.__dict__.get("get_gpu_type") is original:
            patcher.set(module, "get_gpu_type", get_gpu_type)


def _patch_pattern_init(patcher: _AttributePatcher) -> None:
    from torch._inductor.fx_passes import joint_graph

    original = joint_graph.lazy_init

    def lazy_init(input_device: torch.device | None = None) -> Any:
        if _is_mps_device(input_device):
            input_device = torch.device("cpu")
        return original(input_device)

    patcher.set(joint_graph, "lazy_init", lazy_init)


def _patch_core_count(patcher: _AttributePatcher, gpu_cores: int) -> None:
    import torch.backends.mps as backends_mps

    def get_core_count() -> int:
        return gpu_cores

    patcher.set(backends_mps, "get_core_count", get_core_count)


def _patch_unloadable_model(patcher: _AttributePatcher) -> None:
    """g++ makes the statics of inline functions STB_GNU_UNIQUE symbols, and dlclose never
    unloads a library that has one: every load of a package would keep its mappings for the
    rest of the process. -fno-gnu-unique lets closing a model unload its library."""
    from torch._inductor import cpp_builder

    original = cpp_builder._get_optimization_cflags

    def optimization_cflags(cpp_compiler: str, min_optimize: bool = False) -> Any:
        cflags, ldflags = original(cpp_compiler, min_optimize)
        if cpp_builder._is_gcc(cpp_compiler):
            cflags = [*cflags, "fno-gnu-unique"]
        return cflags, ldflags

    patcher.set(cpp_builder, "_get_optimization_cflags", optimization_cflags)


def _patch_constant_identity(patcher: _AttributePatcher) -> None:
    import torch._inductor.graph as inductor_graph

    original = inductor_graph.is_same_tensor

    def is_same_tensor(data: torch.Tensor, value: torch.Tensor) -> bool:
        if _is_fake(data) or _is_fake(value):
            return data is value
        return original(data, value)

    patcher.set(inductor_graph, "is_same_tensor", is_same_tensor)


def _patch_constant_values(patcher: _AttributePatcher, real: RealConstants) -> None:
    import torch._inductor.codecache as codecache
    from torch._inductor.graph import GraphLowering, getattr_recursive
    from torch._inductor.ir import Constant
    from torch._inductor.lowering import unsupported_output_tensor
    from torch._inductor import config as inductor_config

    # Not thread-local: Inductor serializes constants from a thread pool. The patch lock keeps
    # other compilations out while this flag is set.
    serializing = threading.Event()
    original_value_of = GraphLowering.get_original_value_of_constant

    def get_original_value_of_constant(self: GraphLowering, name: str) -> torch.Tensor:
        value = original_value_of(self, name)
        if serializing.is_set() and _is_fake(value):
            replacement = real.lookup(self.allocated_constant_name.get(name))
            if replacement is None:
                replacement = getattr(value, REAL_VALUE_ATTR, None)
            if replacement is None:
                raise RuntimeError(
                    f"etmetal: no real value for constant {name!r} "
                    f"({self.allocated_constant_name.get(name)!r}); cannot serialize weights")
            if replacement.shape != value.shape or replacement.dtype != value.dtype:
                raise RuntimeError(
                    f"etmetal: real value of constant {name!r} is {replacement.dtype} "
                    f"{tuple(replacement.shape)}, the program expects {value.dtype} "
                    f"{tuple(value.shape)}")
            return replacement
        return value

    original_aot_compile = codecache.AotCodeCompiler.__dict__["compile"].__func__

    def aot_compile(cls: type, graph: GraphLowering, *args: Any, **kwargs: Any) -> Any:
        # Codegen must keep seeing the fake "mps" constants (their device is emitted);
        # only the serialization inside this call needs real bytes.
        serializing.set()
        try:
            return original_aot_compile(cls, graph, *args, **kwargs)
        finally:
            serializing.clear()

    original_can_inline = GraphLowering.__dict__["can_inline_constant"].__func__

    def can_inline_constant(t: torch.Tensor) -> bool:
        return False if _is_fake(t) else original_can_inline(t)

    original_get_attr = GraphLowering.get_attr

    def get_attr(self: GraphLowering, target: str, args: Any, kwargs: Any) -> Any:
        try:
            value = getattr_recursive(self.module, target)
        except AttributeError:
            value = None
        if _is_fake(value) and value.shape == ():
            kept_as_buffer = (
                inductor_config.aot_inductor.use_runtime_constant_folding
                or inductor_config.always_keep_tensor_constants
                or unsupported_output_tensor(value)
                or target in self.mutated_named_buffers)
            replacement = real.lookup(target)
            if not kept_as_buffer and replacement is not None:
                return Constant(value=replacement.item(), dtype=value.dtype, device=value.device)
        return original_get_attr(self, target, args, kwargs)

    patcher.set(GraphLowering, "get_original_value_of_constant", get_original_value_of_constant)
    patcher.set(codecache.AotCodeCompiler, "compile", classmethod(aot_compile))
    patcher.set(GraphLowering, "can_inline_constant", staticmethod(can_inline_constant))
    patcher.set(GraphLowering, "get_attr", get_attr)


def _sdpa_for_mps(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                  is_causal: bool = False, *, scale: float | None = None,
                  enable_gqa: bool = False) -> torch.Tensor:
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    if query.device.type != "mps":
        return sdpa._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, query, key, value,
                           attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf"))
    needs_grad = torch.is_grad_enabled() and (
        query.requires_grad or key.requires_grad or value.requires_grad)
    if dropout_p == 0.0 and not needs_grad:
        if enable_gqa and query.size(-3) != key.size(-3):
            repeats = query.size(-3) // key.size(-3)
            key = key.repeat_interleave(repeats, dim=-3)
            value = value.repeat_interleave(repeats, dim=-3)
        return torch.ops.aten._scaled_dot_product_attention_math_for_mps.default(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)[0]


@contextlib.contextmanager
def _sdpa_kernel_installed() -> Iterator[None]:
    op = torch.ops.aten.scaled_dot_product_attention.default
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    if key in op.py_kernels:
        # Someone else owns a Python kernel for this key; leave it alone.
        yield
        return
    op.py_impl(key)(_sdpa_for_mps)
    try:
        yield
    finally:
        op.py_kernels.pop(key, None)
        op._dispatch_cache.clear()


def _patch_uniform_value_folder(patcher: _AttributePatcher, real: RealConstants) -> None:
    from torch._inductor.fx_passes import joint_graph
    from torch.overrides import TorchFunctionMode

    folder = joint_graph.UniformValueConstantFolder
    original_deduce = folder._deduce_value
    original_peephole = folder._add_peephole_patterns

    def deduce_value(self: Any, node: torch.fx.Node) -> Any:
        if node.op == "get_attr":
            replacement = real.lookup(node.target)  # type: ignore[arg-type]
            if replacement is not None and replacement.numel() == 1:
                return replacement
        device = node.kwargs.get("device") if isinstance(node.kwargs, dict) else None
        if not _is_mps_device(device):
            return original_deduce(self, node)
        kwargs = node.kwargs
        node.kwargs = {**kwargs, "device": torch.device("cpu")}
        try:
            return original_deduce(self, node)
        finally:
            node.kwargs = kwargs

    class _ConstructOnCpu(TorchFunctionMode):
        def __torch_function__(self, func: Callable, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            if _is_mps_device(kwargs.get("device")):
                kwargs["device"] = torch.device("cpu")
            return func(*args, **kwargs)

    def add_peephole_patterns(self: Any) -> None:
        with _ConstructOnCpu():
            original_peephole(self)

    patcher.set(folder, "_deduce_value", deduce_value)
    patcher.set(folder, "_add_peephole_patterns", add_peephole_patterns)


class _DropGpuSizeWarning(logging.Filter):
    """Inductor's "Not enough SMs" warning compares the MPS core count with CUDA SM counts."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Not enough SMs" not in record.getMessage()


@contextlib.contextmanager
def quiet_treespec_deprecation() -> Iterator[None]:
    """torch 2.13 deep-copies its own pytree specs through a deprecated check; the warning
    says nothing about the user's model."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                                category=FutureWarning)
        yield


@contextlib.contextmanager
def _quiet_irrelevant_warnings() -> Iterator[None]:
    logger = logging.getLogger("torch._inductor.utils")
    log_filter = _DropGpuSizeWarning()
    logger.addFilter(log_filter)
    try:
        with quiet_treespec_deprecation():
            yield
    finally:
        logger.removeFilter(log_filter)


@contextlib.contextmanager
def mps_compile_patches(real_constants: Mapping[str, torch.Tensor] | None = None,
                        gpu_cores: int | None = None) -> Iterator[None]:
    """Patch Inductor for an "mps" AOT compile on this host; restore everything on exit.

    `real_constants` maps graph attribute names (state-dict / constant FQNs) to the real CPU
    tensors behind the program's fake "mps" constants.
    """
    check_torch_version()
    cores = resolve_gpu_cores(gpu_cores)
    real = RealConstants(real_constants)
    with _patch_lock:
        patcher = _AttributePatcher()
        with contextlib.ExitStack() as stack:
            stack.callback(patcher.restore)
            _patch_gpu_type(patcher)
            _patch_pattern_init(patcher)
            _patch_core_count(patcher, cores)
            _patch_unloadable_model(patcher)
            _patch_constant_identity(patcher)
            _patch_constant_values(patcher, real)
            _patch_uniform_value_folder(patcher, real)
            stack.enter_context(_sdpa_kernel_installed())
            stack.enter_context(_quiet_irrelevant_warnings())
            yield


@contextlib.contextmanager
def model_links_library(library: str) -> Iterator[None]:
    """The model .so Inductor links records `library` (libetmetal) as a dependency.

    Then the model binds its `aoti_torch_*` calls to libetmetal through its own dependency
    scope, without libetmetal in the global scope (where it would interpose on libtorch).
    Inductor has no option for extra link libraries in AOT mode without libtorch, so the
    function that lists the torch-related libraries adds this one."""
    from torch._inductor import cpp_builder

    directory, name = os.path.split(os.path.realpath(library))
    stem = name[3:].rsplit(".", 1)[0] if name.startswith("lib") else None
    if sys.platform == "darwin":
        # ld64 has no -l:file; the dylib's install name (@rpath/libetmetal.dylib) is recorded.
        if stem is None:
            raise ValueError(f"cannot link a model against {library}: not named lib*.dylib")
        link_name = stem
    else:
        link_name = ":" + name  # DT_NEEDED records the soname, libetmetal.so
    original = cpp_builder._get_torch_related_args

    def torch_related_args(include_pytorch: bool, aot_mode: bool) -> Any:
        include_dirs, libraries_dirs, libraries = original(include_pytorch=include_pytorch,
                                                           aot_mode=aot_mode)
        if aot_mode:
            libraries_dirs = [*libraries_dirs, directory]
            libraries = [*libraries, link_name]
        return include_dirs, libraries_dirs, libraries

    with _patch_lock:
        patcher = _AttributePatcher()
        try:
            patcher.set(cpp_builder, "_get_torch_related_args", torch_related_args)
            yield
        finally:
            patcher.restore()
