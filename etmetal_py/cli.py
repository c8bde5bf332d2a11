"""The `etmetal` command line: compile, export, run, demo, info, trace summary.

Errors print one line, `etmetal: error: ...`, and exit with status 1 (2 for bad usage);
`--traceback` shows the Python traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import statistics
import sys
import time
from typing import Any, Sequence

_DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8",
                "uint8", "bool")


class UsageError(Exception):
    """Bad command-line arguments (exit status 2)."""


# -- compile ------------------------------------------------------------------------------
def parse_input_spec(text: str) -> tuple[list[tuple[str | None, int]], str]:
    """`SHAPE[:DTYPE]`, SHAPE as sizes joined by 'x' or ',', each `N` or `NAME=N`.

    Returns ([(dimension name or None, size)], dtype name)."""
    shape_text, _, dtype = text.partition(":")
    dtype = dtype or "float32"
    if dtype not in _DTYPE_NAMES:
        raise UsageError(f"--input {text!r}: unknown dtype {dtype!r} "
                         f"(one of {', '.join(_DTYPE_NAMES)})")
    dims: list[tuple[str | None, int]] = []
    if shape_text.strip() not in ("", "scalar"):
        for part in re.split(r"[x,]", shape_text):
            name, equals, size = part.strip().rpartition("=")
            if not equals:
                name = None
            if name is not None and not name.isidentifier():
                raise UsageError(f"--input {text!r}: bad dimension name {name!r}")
            if not size.isdigit():
                raise UsageError(f"--input {text!r}: bad size {size!r} (expected e.g. 4x1000 "
                                 "or batch=4x1000)")
            dims.append((name, int(size)))
    return dims, dtype


def parse_dynamic_spec(text: str) -> tuple[str, int | None, int | None]:
    """`NAME` or `NAME=MIN:MAX` (either bound may be left out)."""
    name, equals, bounds = text.partition("=")
    if not name.isidentifier():
        raise UsageError(f"--dynamic {text!r}: bad dimension name {name!r}")
    if not equals:
        return name, None, None
    low_text, colon, high_text = bounds.partition(":")
    if not colon:
        raise UsageError(f"--dynamic {text!r}: expected NAME=MIN:MAX")
    try:
        low = int(low_text) if low_text else None
        high = int(high_text) if high_text else None
    except ValueError:
        raise UsageError(f"--dynamic {text!r}: bounds must be integers") from None
    return name, low, high


def load_factory(reference: str) -> Any:
    """`module.path:factory` or `path/to/file.py:factory` -> the factory object."""
    module_name, colon, attribute = reference.rpartition(":")
    if not colon or not module_name or not attribute:
        raise UsageError(f"{reference!r}: expected MODULE:FACTORY (e.g. mymodels:build)")
    if module_name.endswith(".py") or os.sep in module_name:
        if not os.path.isfile(module_name):
            raise UsageError(f"no such file: {module_name}")
        spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(module_name))[0], module_name)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot import {module_name}")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(module_name)))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.pop(0)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise UsageError(f"cannot import module {module_name!r}: {exc}") from None
        finally:
            sys.path.pop(0)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None


def example_tensor(dims: list[tuple[str | None, int]], dtype_name: str) -> Any:
    import torch

    dtype = getattr(torch, dtype_name)
    shape = [size for _, size in dims]
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float32).to(dtype)
    if dtype == torch.bool:
        return torch.zeros(shape, dtype=torch.bool)
    # Zeros are a valid index for any embedding or gather.
    return torch.zeros(shape, dtype=dtype)


def build_dynamic_shapes(input_dims: list[list[tuple[str | None, int]]],
                         dynamic: list[tuple[str, int | None, int | None]]) -> Any:
    if not dynamic:
        return None
    from torch.export import Dim

    named = {name for dims in input_dims for name, _ in dims if name}
    dims_by_name = {}
    for name, low, high in dynamic:
        if name not in named:
            raise UsageError(f"--dynamic {name}: no --input names a dimension {name!r} "
                             f"(write e.g. --input {name}=4x1000)")
        kwargs = {}
        if low is not None:
            kwargs["min"] = low
        if high is not None:
            kwargs["max"] = high
        dims_by_name[name] = Dim(name, **kwargs)
    return tuple({index: dims_by_name[name] for index, (name, _) in enumerate(dims)
                  if name in dims_by_name} or None for dims in input_dims)


def command_compile(args: argparse.Namespace) -> int:
    from .aoti import aoti_compile_and_package, export

    if not args.output.endswith(".pt2"):
        raise UsageError(f"-o {args.output}: the package name must end in .pt2")
    inputs = [parse_input_spec(text) for text in args.input]
    dynamic = [parse_dynamic_spec(text) for text in args.dynamic]
    model = _model_from_factory(args.factory)
    examples = tuple(example_tensor(dims, dtype) for dims, dtype in inputs)
    dynamic_shapes = build_dynamic_shapes([dims for dims, _ in inputs], dynamic)
    start = time.perf_counter()
    program = export(model, examples, dynamic_shapes=dynamic_shapes)
    exported = time.perf_counter()
    path = aoti_compile_and_package(program, package_path=args.output,
                                    external_weights=args.external_weights,
                                    gpu_cores=args.gpu_cores)
    done = time.perf_counter()
    size = os.path.getsize(path)
    print(f"wrote {path} ({size / 1e6:.2f} MB): export {exported - start:.1f} s, "
          f"compile {done - exported:.1f} s")
    return 0


def command_export(args: argparse.Namespace) -> int:
    from .executorch import export_pte

    if not args.output.endswith(".pte"):
        raise UsageError(f"-o {args.output}: the program name must end in .pte")
    inputs = [parse_input_spec(text) for text in args.input]
    dynamic = [parse_dynamic_spec(text) for text in args.dynamic]
    model = _model_from_factory(args.factory)
    examples = tuple(example_tensor(dims, dtype) for dims, dtype in inputs)
    dynamic_shapes = build_dynamic_shapes([dims for dims, _ in inputs], dynamic)
    start = time.perf_counter()
    path = export_pte(model, examples, args.output, dynamic_shapes=dynamic_shapes,
                      gpu_cores=args.gpu_cores)
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB, ExecuTorch Metal program): "
          f"{time.perf_counter() - start:.1f} s")
    return 0


def _model_from_factory(reference: str) -> Any:
    import torch

    factory = load_factory(reference)
    model = factory() if callable(factory) and not isinstance(factory, torch.nn.Module) \
        else factory
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{reference} returned a {type(model).__name__}, "
                         "not a torch.nn.Module")
    return model.eval()


# -- run ----------------------------------------------------------------------------------
def _inputs_from_npz(path: str, input_names: Sequence[str]) -> list[Any]:
    import numpy as np

    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--inputs {path}: {exc}") from None
    with archive:
        keys = list(archive.files)
        if set(input_names) <= set(keys):
            keys = list(input_names)
        return [archive[key] for key in keys]


def _random_inputs(runner: Any) -> list[Any]:
    import torch

    specs = runner.input_signature
    if specs is None:
        raise UsageError("the package records no input signature (not built by etmetal): "
                         "pass --inputs in.npz")
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for spec in specs:
        shape = []
        for dim, size in enumerate(spec["shape"]):
            if size is None:
                low, high = spec["ranges"].get(str(dim), (None, None))
                size = max(low or 1, 2) if high is None or high >= 2 else high
            shape.append(size)
        dtype = spec["dtype"]
        if dtype.is_floating_point:
            inputs.append(torch.randn(shape, generator=generator).to(dtype))
        elif dtype == torch.bool:
            inputs.append(torch.zeros(shape, dtype=torch.bool))
        else:
            inputs.append(torch.zeros(shape, dtype=dtype))
    return inputs


def command_run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    import etmetal_py

    from .aoti import aoti_load_package

    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if not os.path.isfile(args.package):
        raise UsageError(f"no such package: {args.package}")
    if args.package.endswith(".pte"):
        return command_run_pte(args)
    with aoti_load_package(args.package) as runner:
        inputs = (_inputs_from_npz(args.inputs, runner.input_names) if args.inputs
                  else _random_inputs(runner))
        outputs = runner.run_flat([_as_cpu_tensor(value) for value in inputs])
        latencies = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            runner.run_flat([_as_cpu_tensor(value) for value in inputs])
            latencies.append(time.perf_counter() - start)
        print(f"{args.package}: {runner.num_inputs} input(s), {runner.num_outputs} output(s) "
              f"on {etmetal_py.device_name()} ({etmetal_py.device_kind()})")
        for name, output in zip(runner.output_names, outputs):
            values = output.double()
            print(f"  {name}: {str(output.dtype).removeprefix('torch.')} "
                  f"{tuple(output.shape)} sum={float(values.sum()):.6g} "
                  f"abs_sum={float(values.abs().sum()):.6g}")
        ordered = sorted(latencies)
        p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
        print(f"  latency over {len(latencies)} run(s): min {ordered[0] * 1e3:.3f} ms, "
              f"median {statistics.median(ordered) * 1e3:.3f} ms, "
              f"mean {statistics.fmean(ordered) * 1e3:.3f} ms, p90 {p90 * 1e3:.3f} ms, "
              f"max {ordered[-1] * 1e3:.3f} ms")
        if args.output:
            arrays = {name: (output.float() if output.dtype == torch.bfloat16 else output).numpy()
                      for name, output in zip(runner.output_names, outputs)}
            np.savez(args.output, **arrays)
            print(f"  wrote {args.output}")
    return 0


# ExecuTorch ScalarType codes (c10's) of the dtypes `etmetal run` can make inputs for.
_SCALAR_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                      6: "float32", 7: "float64", 11: "bool", 15: "bfloat16"}


def _random_pte_inputs(meta: Any) -> list[Any]:
    inputs = []
    for index in range(meta.num_inputs()):
        info = meta.input_tensor_meta(index)
        name = _SCALAR_TYPE_NAMES.get(info.dtype())
        if name is None:
            raise UsageError(f"input {index} has ScalarType {info.dtype()}; pass --inputs in.npz")
        inputs.append(example_tensor([(None, size) for size in info.sizes()], name))
    return inputs


def command_run_pte(args: argparse.Namespace) -> int:
    """`etmetal run model.pte`: its first method through ExecuTorch's runtime, with etmetal's
    MetalBackend."""
    import numpy as np
    import torch

    import etmetal_py

    from .executorch import register_backend

    register_backend()
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(args.package)
    method_name = args.method or sorted(program.method_names)[0]
    if method_name not in program.method_names:
        raise UsageError(f"{args.package} has no method {method_name!r} "
                         f"(it has {', '.join(sorted(program.method_names))})")
    method = program.load_method(method_name)
    meta = method.metadata
    names = [f"input{i}" for i in range(meta.num_inputs())]
    inputs = [_as_cpu_tensor(value) for value in
              (_inputs_from_npz(args.inputs, names) if args.inputs else _random_pte_inputs(meta))]
    outputs = method.execute(inputs)
    latencies = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        method.execute(inputs)
        latencies.append(time.perf_counter() - start)
    print(f"{args.package} ({method_name}): {meta.num_inputs()} input(s), "
          f"{meta.num_outputs()} output(s) through ExecuTorch on {etmetal_py.device_name()} "
          f"({etmetal_py.device_kind()})")
    tensors = [output for output in outputs if isinstance(output, torch.Tensor)]
    for index, output in enumerate(tensors):
        values = output.double()
        print(f"  output{index}: {str(output.dtype).removeprefix('torch.')} "
              f"{tuple(output.shape)} sum={float(values.sum()):.6g} "
              f"abs_sum={float(values.abs().sum()):.6g}")
    ordered = sorted(latencies)
    print(f"  latency over {len(ordered)} run(s): min {ordered[0] * 1e3:.3f} ms, "
          f"median {statistics.median(ordered) * 1e3:.3f} ms, max {ordered[-1] * 1e3:.3f} ms")
    if args.output:
        np.savez(args.output, **{
            f"output{i}": (t.float() if t.dtype == torch.bfloat16 else t).numpy()
            for i, t in enumerate(tensors)})
        print(f"  wrote {args.output}")
    return 0


def _as_cpu_tensor(value: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    return value


# -- demo / info ---------------------------------------------------------------------------
def command_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    return run_demo(repeat=args.repeat)


def _directory_size(path: str) -> tuple[int, int]:
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(folder, name))
                files += 1
            except OSError:
                pass
    return total, files


def _optional_string(function_name: str) -> str | None:
    """A string from a libetmetal function that older builds may lack."""
    from ._ffi import ffi, lib

    try:
        function = getattr(lib, function_name)
    except AttributeError:
        return None
    value = function()
    return ffi.string(value).decode() if value != ffi.NULL else None


def _cpu_kernel_cache_dir() -> str:
    """The CPU device's kernel cache, by the rule in native/device/cpu/kernel_compiler.h."""
    if os.environ.get("ETMETAL_CACHE_DIR"):
        return os.environ["ETMETAL_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "etmetal")
    if os.environ.get("HOME"):
        return os.path.join(os.environ["HOME"], ".cache", "etmetal")
    return f"/tmp/etmetal-cache-{os.getuid()}"


def _cpu_kernel_compiler() -> str:
    """The CPU device's C++ compiler, by the same rule: $ETMETAL_CXX, else g++, else clang++."""
    import shutil
    import subprocess

    requested = os.environ.get("ETMETAL_CXX")
    candidates = [requested] if requested else ["g++", "clang++"]
    for name in candidates:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            version = []
        return f"{path} ({version[0].strip()})" if version else path
    return f"not found ({'ETMETAL_CXX=' + requested if requested else 'no g++ or clang++ on PATH'})"


def command_info(args: argparse.Namespace) -> int:
    import etmetal_py

    kind = etmetal_py.device_kind()
    print(f"library:      {etmetal_py.library_path()}")
    print(f"version:      {etmetal_py.__version__}")
    print(f"device:       {etmetal_py.device_name()} ({kind})")
    compiler = _optional_string("etmetal_shader_compiler")
    cache = _optional_string("etmetal_kernel_cache_dir")
    if kind == "cpu":
        compiler = compiler or _cpu_kernel_compiler()
        cache = cache or _cpu_kernel_cache_dir()
    print(f"compiler:     {compiler or 'the Metal framework compiles MSL'}")
    if cache:
        if os.path.isdir(cache):
            size, files = _directory_size(cache)
            print(f"kernel cache: {cache} ({files} files, {size / 1e6:.1f} MB)")
        else:
            print(f"kernel cache: {cache} (not created yet)")
    else:
        print("kernel cache: Metal's own shader cache")
    from ._ffi import check, ffi, lib

    stream = ffi.new("etmetal_stream_stats_t*")
    check(lib.etmetal_stream_stats(stream))
    print(f"commit:       every {stream.max_ops_per_buffer} commands or "
          f"{stream.max_mb_per_buffer} MB per command buffer")
    configuration = _optional_string("etmetal_configuration")
    if configuration:
        print("configuration:")
        for line in configuration.splitlines():
            print(f"  {line}")
    try:
        import torch

        print(f"torch:        {torch.__version__}")
    except ImportError:
        print("torch:        not installed (needed to compile and run packages)")
    return 0


# -- trace --------------------------------------------------------------------------------
def command_trace_summary(args: argparse.Namespace) -> int:
    from etmetal_py import trace

    try:
        events = trace.load(args.trace)
    except OSError as exc:
        raise UsageError(f"cannot read {args.trace}: {exc.strerror}") from None
    print(trace.format_summary(trace.summarize(events), top=args.top))
    return 0


def _add_trace_parser(commands: Any) -> None:
    trace_parser = commands.add_parser("trace", help="dispatch traces (ETMETAL_TRACE=out.json)")
    actions = trace_parser.add_subparsers(dest="trace_command", metavar="ACTION",
                                          parser_class=_Parser, required=True)
    summary_parser = actions.add_parser("summary", help="top kernels by time and count")
    summary_parser.add_argument("trace", metavar="out.json")
    summary_parser.add_argument("--top", type=int, default=15, help="kernels listed (default 15)")
    summary_parser.set_defaults(handler=command_trace_summary)


# -- entry point ---------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit status 2
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="etmetal", description="Compile PyTorch models for Metal (device "
                     "\"mps\") with AOTInductor and run them through libetmetal.")
    parser.add_argument("--traceback", action="store_true",
                        help="show the Python traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    compile_parser = commands.add_parser("compile", help="export and compile a model")
    compile_parser.add_argument("factory", metavar="MODULE:FACTORY",
                                help="module (or file.py) and a callable returning the model")
    compile_parser.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                                required=True,
                                help="one example input, e.g. 4x1000 or batch=4x1000:float16; "
                                     "repeat per input")
    compile_parser.add_argument("-o", "--output", required=True, metavar="model.pt2")
    compile_parser.add_argument("--dynamic", action="append", default=[],
                                metavar="NAME[=MIN:MAX]",
                                help="make the dimensions called NAME dynamic")
    compile_parser.add_argument("--external-weights", action="store_true",
                                help="keep the weights in a blob beside the .so")
    compile_parser.add_argument("--gpu-cores", type=int, default=None,
                                help="GPU core count the kernels are tuned for "
                                     "(default $ETMETAL_GPU_CORES, else 10)")
    compile_parser.set_defaults(handler=command_compile)

    export_parser = commands.add_parser(
        "export", help="export a model as an ExecuTorch Metal program (.pte)")
    export_parser.add_argument("factory", metavar="MODULE:FACTORY",
                               help="module (or file.py) and a callable returning the model")
    export_parser.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                               required=True, help="one example input; repeat per input")
    export_parser.add_argument("-o", "--output", required=True, metavar="model.pte")
    export_parser.add_argument("--dynamic", action="append", default=[],
                               metavar="NAME[=MIN:MAX]",
                               help="make the dimensions called NAME dynamic")
    export_parser.add_argument("--gpu-cores", type=int, default=None,
                               help="GPU core count the kernels are tuned for")
    export_parser.set_defaults(handler=command_export)

    run_parser = commands.add_parser("run", help="run a compiled package (.pt2) or an "
                                                 "ExecuTorch Metal program (.pte)")
    run_parser.add_argument("package", metavar="model.pt2|model.pte")
    run_parser.add_argument("--method", help=".pte: the method to run (default: the first)")
    run_parser.add_argument("--inputs", metavar="in.npz",
                            help="input arrays (by input name, else in file order); "
                                 "default: random inputs of the recorded shapes")
    run_parser.add_argument("--output", metavar="out.npz", help="save the outputs")
    run_parser.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    run_parser.set_defaults(handler=command_run)

    demo_parser = commands.add_parser("demo", help="compile and run a built-in decoder block")
    demo_parser.add_argument("--repeat", type=int, default=20, help="timed runs (default 20)")
    demo_parser.set_defaults(handler=command_demo)

    info_parser = commands.add_parser("info", help="library, device and cache information")
    info_parser.set_defaults(handler=command_info)
    _add_trace_parser(commands)
    return parser


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in argv
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "command", None):
            raise UsageError("a command is required: compile, export, run, demo, info or trace")
        return args.handler(args)
    except UsageError as exc:
        if show_traceback:
            raise
        print(f"etmetal: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("etmetal: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every failure becomes one line unless --traceback
        if show_traceback:
            raise
        print(f"etmetal: error: {_one_line(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
