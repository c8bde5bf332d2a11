"""Load an AOTInductor "mps" package (.pt2) and run it through libetmetal.

How a model binds to libetmetal, next to libtorch or any other provider of `aoti_torch_*`:
`etmetal_py._ffi` loads libetmetal RTLD_LOCAL, so its symbols never interpose on anyone
else's. A model .so compiled by etmetal records libetmetal as a dependency (DT_NEEDED
`libetmetal.so`, matched by soname against the copy already loaded), so its lookups reach
libetmetal through its own dependency scope. When another library in the global scope also
defines some of the model's `aoti_torch_*` symbols (libtorch loaded RTLD_GLOBAL, say), the
model is opened with RTLD_DEEPBIND, which puts its own dependencies first. On macOS the
two-level namespace binds the model to the libetmetal it was linked against.

Before the .so is opened, its undefined symbols are checked against libetmetal, so a model
that needs a function libetmetal lacks fails to load with that function's name instead of
aborting on first use.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import threading
import weakref
import zipfile
from typing import Any, Sequence

import numpy as np
import torch
import torch.utils._pytree as pytree

from .. import _ffi
from ..tensors import MPS, Tensor, dtype_code
from .compile import SIGNATURE_FILE
from ._symbols import (SymbolReadError, global_symbol_address, library_of_address, needed_libraries,
                       undefined_symbols)

# The model container API every AOTInductor model .so exports (aoti_runtime/interface.h).
_CONTAINER_CDEF = """
typedef int32_t AOTIRuntimeError;
typedef struct AOTInductorModelContainerOpaque* AOTInductorModelContainerHandle;
typedef struct AOTInductorStreamOpaque* AOTInductorStreamHandle;
typedef struct AOTIProxyExecutorOpaque* AOTIProxyExecutorHandle;
AOTIRuntimeError AOTInductorModelContainerCreateWithDevice(
    AOTInductorModelContainerHandle* container_handle, size_t num_models,
    const char* device_str, const char* cubin_dir);
AOTIRuntimeError AOTInductorModelContainerDelete(AOTInductorModelContainerHandle container_handle);
AOTIRuntimeError AOTInductorModelContainerRun(
    AOTInductorModelContainerHandle container_handle, AtenTensorHandle* input_handles,
    size_t num_inputs, AtenTensorHandle* output_handles, size_t num_outputs,
    AOTInductorStreamHandle stream_handle, AOTIProxyExecutorHandle proxy_executor_handle);
AOTIRuntimeError AOTInductorModelContainerGetNumInputs(
    AOTInductorModelContainerHandle container_handle, size_t* ret_num_inputs);
AOTIRuntimeError AOTInductorModelContainerGetInputName(
    AOTInductorModelContainerHandle container_handle, size_t input_idx,
    const char** ret_input_names);
AOTIRuntimeError AOTInductorModelContainerGetNumOutputs(
    AOTInductorModelContainerHandle container_handle, size_t* ret_num_outputs);
AOTIRuntimeError AOTInductorModelContainerGetOutputName(
    AOTInductorModelContainerHandle container_handle, size_t output_idx,
    const char** ret_output_names);
AOTIRuntimeError AOTInductorModelContainerGetNumConstants(
    AOTInductorModelContainerHandle container_handle, size_t* num_constants);
AOTIRuntimeError AOTInductorModelContainerGetConstantOriginalFQN(
    AOTInductorModelContainerHandle container_handle, size_t idx, const char** original_fqn);
AOTIRuntimeError AOTInductorModelContainerGetConstantsBlobSize(
    AOTInductorModelContainerHandle container_handle, uint64_t* ret_size);
AOTIRuntimeError AOTInductorModelUpdateConstantsFromBlob(
    AOTInductorModelContainerHandle container_handle, const uint8_t* weight_blob_ptr);
AOTIRuntimeError AOTInductorModelContainerGetCallSpec(
    AOTInductorModelContainerHandle container_handle, const char** in_spec,
    const char** out_spec);
"""
# Exported by torch >= 2.8 model libraries; optional.
_LAST_ERROR_CDEF = "AOTIRuntimeError AOTInductorGetLastError(const char** error_msg);"

_container_ffi = None
_container_ffi_lock = threading.Lock()


def _get_container_ffi():
    global _container_ffi
    with _container_ffi_lock:
        if _container_ffi is None:
            import cffi

            container_ffi = cffi.FFI()
            container_ffi.include(_ffi.ffi)  # shares AtenTensorHandle with the binding
            container_ffi.cdef(_CONTAINER_CDEF)
            container_ffi.cdef(_LAST_ERROR_CDEF)
            _container_ffi = container_ffi
        return _container_ffi


class PackageError(RuntimeError):
    """The package cannot be loaded."""


class RunError(RuntimeError):
    """A model run failed."""


# Symbols a model library may leave undefined that libetmetal is expected to provide.
_RUNTIME_SYMBOL_PREFIXES = ("aoti_torch_", "etmetal_", "metal_")
_RUNTIME_SONAME = "libetmetal.so"


def _runtime_library_path() -> str:
    address = int(_ffi.ffi.cast("uintptr_t", _ffi.ffi.addressof(_ffi.lib, "etmetal_version")))
    return library_of_address(address) or os.path.realpath(str(_ffi.library_path()))


def check_model_symbols(library: str, subject: str = "the model") -> bool:
    """Raise PackageError unless every runtime symbol `library` needs will bind to libetmetal.

    Returns True when that takes RTLD_DEEPBIND: another library in the global scope defines
    some of those symbols too. `subject` names the library in messages."""
    try:
        strong, _weak = undefined_symbols(library)
        needed_files = needed_libraries(library)
    except (OSError, SymbolReadError) as exc:
        raise PackageError(f"cannot read the symbols of {os.path.basename(library)}: {exc}") from None
    needed = sorted(name for name in strong if name.startswith(_RUNTIME_SYMBOL_PREFIXES))
    runtime = _runtime_library_path()
    exports = ctypes.CDLL(runtime, mode=os.RTLD_NOLOAD | os.RTLD_NOW)  # the loaded copy
    missing = [name for name in needed if not hasattr(exports, name)]
    if missing:
        raise PackageError(
            f"{subject} needs {', '.join(missing)}, which libetmetal ({runtime}) does not "
            f"export")
    if needed_files is None:
        return False  # Mach-O: two-level namespace bindings, recorded at link time
    # Where the global scope would bind each symbol (None: nowhere).
    providers = {name: library_of_address(global_symbol_address(name)) for name in needed}
    if os.path.basename(runtime) in needed_files or _RUNTIME_SONAME in needed_files:
        return any(owner is not None and owner != runtime for owner in providers.values())
    unbound = [f"{name} ({'nowhere' if owner is None else 'from ' + owner})"
               for name, owner in providers.items() if owner != runtime]
    if unbound:
        raise PackageError(
            f"{subject} does not link libetmetal (it was compiled by an older etmetal or "
            "without etmetal), so it would bind runtime functions elsewhere: "
            + ", ".join(unbound[:5]) + (", ..." if len(unbound) > 5 else "")
            + "; compile it again with etmetal_py.aoti_compile_and_package")
    return False


_library_lock = threading.Lock()
_library_folder: str | None = None


def _library_file_for(archive: zipfile.ZipFile, member: str) -> str:
    """The path of the model library `member`, one file per distinct content for the life of
    the process, so that opening a package again reuses the library loaded the first time
    (_open_model_library) instead of mapping another copy. Unloading is not worth having: a
    model library stays loaded anyway while any thread that ran it lives, since its
    thread_local destructors pin it."""
    global _library_folder
    try:
        data = archive.read(member)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise PackageError(f"cannot extract {member}: {exc}") from None
    with _library_lock:
        if _library_folder is None:
            _library_folder = tempfile.mkdtemp(prefix="etmetal-models-")
            atexit.register(shutil.rmtree, _library_folder, True)
        path = os.path.join(_library_folder, hashlib.sha256(data).hexdigest() + ".so")
        if not os.path.exists(path):
            partial = path + ".partial"
            try:
                with open(partial, "wb") as target:
                    target.write(data)
                os.replace(partial, path)
            except OSError as exc:
                raise PackageError(f"cannot extract {member}: {exc}") from None
    return path


_open_libraries: dict[tuple[str, int], object] = {}


def _open_model_library(path: str, flags: int):
    """The model library at `path`, opened once for the life of the process. cffi keeps
    every library object `dlopen` returns until its FFI is gone, closed or not, so opening
    per load would grow the process by one object per load; and the library stays loaded
    anyway (see _library_file_for)."""
    container_ffi = _get_container_ffi()
    with _library_lock:
        library = _open_libraries.get((path, flags))
        if library is None:
            try:
                library = container_ffi.dlopen(path, flags)
            except OSError as exc:
                raise PackageError(f"cannot load the model library: {exc}") from None
            _open_libraries[(path, flags)] = library
        return library


class _PackageContents:
    """The files of one model inside a .pt2 archive, extracted into a private folder."""

    def __init__(self, package_path: str, model_name: str) -> None:
        self.folder = tempfile.mkdtemp(prefix="etmetal-model-")
        try:
            self._extract(package_path, model_name)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def _extract(self, package_path: str, model_name: str) -> None:
        try:
            archive = zipfile.ZipFile(package_path)
        except FileNotFoundError:
            raise PackageError(f"no such package: {package_path}") from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise PackageError(f"{package_path} is not a .pt2 package: {exc}") from None
        with archive:
            names = archive.namelist()
            model_dir = f"/data/aotinductor/{model_name}/"
            members = [n for n in names if model_dir in "/" + n]
            libraries = [n for n in members if n.endswith(".so") or n.endswith(".dylib")]
            if not libraries:
                found = sorted({n.split("/data/aotinductor/")[1].split("/")[0]
                                for n in ("/" + n for n in names) if "/data/aotinductor/" in n})
                hint = f" (models in the package: {', '.join(found)})" if found else ""
                raise PackageError(
                    f"{package_path} has no compiled library for model {model_name!r}{hint}")
            if len(libraries) > 1:
                raise PackageError(f"{package_path} holds several libraries for model "
                                   f"{model_name!r}: {', '.join(libraries)}")
            blobs = [n for n in members if n.endswith("_weights.blob")]
            # Fixed local names: nothing from the archive decides where files are written.
            self.library = _library_file_for(archive, libraries[0])
            self.weights = self._write(archive, blobs[0], "weights.blob") if blobs else None
            root = names[0].split("/")[0] if names else ""
            self.signature = None
            if f"{root}/{SIGNATURE_FILE}" in names:
                try:
                    self.signature = json.loads(archive.read(f"{root}/{SIGNATURE_FILE}"))
                except (ValueError, UnicodeDecodeError) as exc:
                    raise PackageError(f"{package_path}: broken {SIGNATURE_FILE}: {exc}") from None

    def _write(self, archive: zipfile.ZipFile, member: str, local_name: str) -> str:
        path = os.path.join(self.folder, local_name)
        try:
            with archive.open(member) as source, open(path, "wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise PackageError(f"cannot extract {member}: {exc}") from None
        return path

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _torch_dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise PackageError(f"unknown dtype {name!r} in {SIGNATURE_FILE}")
    return dtype


def _as_torch(value: torch.Tensor | np.ndarray, position: int) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if value.device.type != "cpu":
        raise TypeError(f"input {position} is on {value.device}; pass CPU tensors")
    return value.detach()


class _Resources:
    """Everything a runner must release, kept apart so a finalizer can release it."""

    def __init__(self) -> None:
        self.library = None
        self.container = None
        self.contents: _PackageContents | None = None

    def release(self) -> None:
        library, container = self.library, self.container
        self.container = None
        self.library = None
        if container is not None and library is not None:
            library.AOTInductorModelContainerDelete(container)
        if self.contents is not None:
            self.contents.remove()
            self.contents = None


class ModelRunner:
    """A loaded model package. Call it like the exported module.

    Runs from several threads are safe: each thread encodes on its own stream, and the
    container hands each run one of its `num_models` model instances (a run waits while all
    are busy). `close()` waits for runs in progress.
    """

    def __init__(self, package_path: str | os.PathLike, *, model_name: str = "model",
                 num_models: int = 1) -> None:
        if isinstance(num_models, bool) or not isinstance(num_models, int) or num_models < 1:
            raise ValueError(f"num_models must be a positive integer, got {num_models!r}")
        self.package_path = os.fspath(package_path)
        self._state = _Resources()
        self._finalizer = weakref.finalize(self, self._state.release)
        self._condition = threading.Condition()
        self._active_runs = 0
        self._closed = False
        try:
            self._load(model_name, num_models)
        except BaseException:
            self.close()
            raise

    # -- loading ------------------------------------------------------------------------
    def _load(self, model_name: str, num_models: int) -> None:
        contents = _PackageContents(self.package_path, model_name)
        self._state.contents = contents
        deep_bind = check_model_symbols(contents.library)
        cffi_module = _get_container_ffi()
        self._ffi = cffi_module
        flags = cffi_module.RTLD_NOW | cffi_module.RTLD_LOCAL
        if deep_bind:
            flags |= os.RTLD_DEEPBIND
        library = _open_model_library(contents.library, flags)
        self._state.library = library
        self._lib = library
        try:
            self._get_last_error = library.AOTInductorGetLastError
        except AttributeError:
            self._get_last_error = None

        handle = cffi_module.new("AOTInductorModelContainerHandle*")
        self._check(library.AOTInductorModelContainerCreateWithDevice(
            handle, num_models, b"mps", cffi_module.NULL), "creating the model container",
            PackageError)
        self._container = handle[0]
        self._state.container = self._container

        if contents.weights is not None:
            self._load_weights(contents.weights)

        self.num_inputs = self._get_size(library.AOTInductorModelContainerGetNumInputs)
        self.num_outputs = self._get_size(library.AOTInductorModelContainerGetNumOutputs)
        self.input_names = [self._get_name(library.AOTInductorModelContainerGetInputName, i)
                            for i in range(self.num_inputs)]
        self.output_names = [self._get_name(library.AOTInductorModelContainerGetOutputName, i)
                             for i in range(self.num_outputs)]
        num_constants = self._get_size(library.AOTInductorModelContainerGetNumConstants)
        self.constant_fqns = [
            self._get_name(library.AOTInductorModelContainerGetConstantOriginalFQN, i)
            for i in range(num_constants)]
        in_spec = cffi_module.new("const char**")
        out_spec = cffi_module.new("const char**")
        self._check(library.AOTInductorModelContainerGetCallSpec(
            self._container, in_spec, out_spec), "reading the call spec", PackageError)
        self._in_spec = self._load_spec(in_spec[0])
        self._out_spec = self._load_spec(out_spec[0])
        self.input_signature = self._input_specs_from(contents.signature)

    def _load_weights(self, blob_path: str) -> None:
        expected = self._ffi.new("uint64_t*")
        self._check(self._lib.AOTInductorModelContainerGetConstantsBlobSize(
            self._container, expected), "reading the weights size", PackageError)
        blob = np.fromfile(blob_path, dtype=np.uint8)
        if blob.size < expected[0]:
            raise PackageError(f"the weights blob holds {blob.size} bytes; the model needs "
                               f"{expected[0]}")
        pointer = self._ffi.cast("const uint8_t*", blob.ctypes.data)
        # The model copies the weights into device memory; the blob can go afterwards.
        self._check(self._lib.AOTInductorModelUpdateConstantsFromBlob(self._container, pointer),
                    "loading the weights", PackageError)

    def _load_spec(self, text) -> Any:
        if text == self._ffi.NULL:
            return None
        raw = self._ffi.string(text).decode()
        if not raw:
            return None
        try:
            return pytree.treespec_loads(raw)
        except Exception as exc:
            raise PackageError(f"unreadable call spec in the model: {exc}") from None

    def _input_specs_from(self, signature: dict | None) -> list[dict] | None:
        if not signature:
            return None
        inputs = signature.get("inputs")
        if not isinstance(inputs, list) or len(inputs) != self.num_inputs:
            return None
        specs = []
        for entry in inputs:
            specs.append({"dtype": _torch_dtype_from_name(entry["dtype"]),
                          "shape": entry["shape"], "strides": entry.get("strides"),
                          "ranges": entry.get("ranges") or {}})
        return specs

    def _get_size(self, function) -> int:
        out = self._ffi.new("size_t*")
        self._check(function(self._container, out), function.__name__, PackageError)
        return int(out[0])

    def _get_name(self, function, index: int) -> str:
        out = self._ffi.new("const char**")
        self._check(function(self._container, index, out), function.__name__, PackageError)
        return self._ffi.string(out[0]).decode() if out[0] != self._ffi.NULL else ""

    # -- errors -------------------------------------------------------------------------
    def _error_text(self) -> str:
        parts = []
        if self._get_last_error is not None:
            message = self._ffi.new("const char**")
            if self._get_last_error(message) == 0 and message[0] != self._ffi.NULL:
                text = self._ffi.string(message[0]).decode("utf-8", "replace").strip()
                if text:
                    parts.append(text)
        runtime = _ffi.last_error().strip()
        if runtime and runtime not in parts:
            parts.append(runtime)
        return "; ".join(parts) or "no error message"

    def _check(self, code: int, what: str, error: type = RunError) -> None:
        if code != 0:
            raise error(f"{what} failed: {self._error_text()}")

    # -- running ------------------------------------------------------------------------
    def _flatten(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        if self._in_spec is not None and kwargs:
            from torch.export._tree_utils import reorder_kwargs
            try:
                kwargs = reorder_kwargs(kwargs, self._in_spec)
            except Exception as exc:
                raise TypeError(f"keyword arguments do not match the model's: {exc}") from None
        leaves = pytree.tree_leaves((args, kwargs))
        tensors = [value for value in leaves if isinstance(value, (torch.Tensor, np.ndarray))]
        if len(tensors) != self.num_inputs:
            raise TypeError(f"the model takes {self.num_inputs} tensor input(s), "
                            f"got {len(tensors)}")
        return [_as_torch(value, i) for i, value in enumerate(tensors)]

    def _check_input(self, position: int, tensor: torch.Tensor) -> tuple[int, ...] | None:
        """Validates an input against the recorded signature; returns the strides to use."""
        if self.input_signature is None:
            return None
        spec = self.input_signature[position]
        name = self.input_names[position] if position < len(self.input_names) else position
        if tensor.dtype != spec["dtype"]:
            raise TypeError(f"input {name}: dtype {tensor.dtype}, the model expects "
                            f"{spec['dtype']}")
        shape = spec["shape"]
        if tensor.dim() != len(shape):
            raise ValueError(f"input {name}: {tensor.dim()} dimensions, the model expects "
                             f"{len(shape)} (shape {self._shape_text(shape)})")
        for dim, (size, expected) in enumerate(zip(tensor.shape, shape)):
            if expected is None:
                low, high = spec["ranges"].get(str(dim), (None, None))
                if (low is not None and size < low) or (high is not None and size > high):
                    raise ValueError(f"input {name}: size {size} of dimension {dim} is outside "
                                     f"the exported range [{low}, {high}]")
            elif size != expected:
                raise ValueError(f"input {name}: shape {tuple(tensor.shape)}, the model expects "
                                 f"{self._shape_text(shape)}")
        strides = spec["strides"]
        return tuple(strides) if strides is not None else None

    @staticmethod
    def _shape_text(shape: Sequence) -> str:
        return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"

    def _device_input(self, tensor: torch.Tensor, strides: tuple[int, ...] | None) -> Tensor:
        if strides is None:
            strides = torch.empty(tensor.shape, device="meta").stride()
        device_tensor = Tensor.empty(tuple(tensor.shape), dtype_code(tensor.dtype),
                                     strides=strides, device=MPS)
        device_tensor.write(tensor)
        return device_tensor

    def run_flat(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Runs the model on flat CPU tensor inputs; returns the flat outputs as CPU tensors."""
        if len(inputs) != self.num_inputs:
            raise TypeError(f"the model takes {self.num_inputs} tensor input(s), "
                            f"got {len(inputs)}")
        self._begin_run()
        try:
            return self._run_flat(inputs)
        finally:
            self._end_run()

    def _run_flat(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        device_inputs: list[Tensor] = []
        try:
            for position, tensor in enumerate(inputs):
                strides = self._check_input(position, tensor)
                device_inputs.append(self._device_input(tensor, strides))
        except _ffi.EtmetalError as exc:
            raise RunError(f"copying input {len(device_inputs)} to the device failed: {exc}") \
                from None
        input_handles = self._ffi.new("AtenTensorHandle[]", max(1, len(device_inputs)))
        for i, device_tensor in enumerate(device_inputs):
            input_handles[i] = device_tensor.release()  # Run steals the input handles
        output_handles = self._ffi.new("AtenTensorHandle[]", max(1, self.num_outputs))
        code = self._lib.AOTInductorModelContainerRun(
            self._container, input_handles, len(device_inputs), output_handles,
            self.num_outputs, self._ffi.NULL, self._ffi.NULL)
        outputs = [Tensor(output_handles[i]) for i in range(self.num_outputs)
                   if output_handles[i] != self._ffi.NULL]
        try:
            self._check(code, "running the model")
            if len(outputs) != self.num_outputs:
                raise RunError(f"the model returned {len(outputs)} of {self.num_outputs} outputs")
            code = _ffi.lib.etmetal_synchronize(2)
            if code != 0:
                raise RunError(f"running the model failed: {_ffi.last_error()}")
            try:
                return [output.torch() for output in outputs]
            except (_ffi.EtmetalError, TypeError) as exc:
                raise RunError(f"reading the outputs failed: {exc}") from None
        finally:
            for output in outputs:
                output.delete()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self._flatten(args, kwargs)
        outputs = self.run_flat(flat)
        if self._out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return pytree.tree_unflatten(outputs, self._out_spec)

    # -- lifetime -----------------------------------------------------------------------
    def _begin_run(self) -> None:
        with self._condition:
            if self._closed:
                raise RunError("the model runner is closed")
            self._active_runs += 1

    def _end_run(self) -> None:
        with self._condition:
            self._active_runs -= 1
            if self._active_runs == 0:
                self._condition.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Frees the model, its weights and its extracted files; waits for runs in progress."""
        with self._condition:
            if self._closed:
                return
            self._closed = True
            while self._active_runs:
                self._condition.wait()
        self._finalizer()

    def __enter__(self) -> "ModelRunner":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.num_inputs} inputs, {self.num_outputs} outputs"
        return f"<etmetal ModelRunner {self.package_path!r} ({state})>"


def aoti_load_package(path: str | os.PathLike, *, model_name: str = "model",
                      num_models: int = 1) -> ModelRunner:
    """Load a .pt2 package compiled for "mps" and return a callable runner."""
    return ModelRunner(path, model_name=model_name, num_models=num_models)
