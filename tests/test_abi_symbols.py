"""The exported ABI: exactly the expected symbols, with torch 2.13's C signatures."""

import importlib.util
import re
import shutil
import sys
import subprocess
from pathlib import Path

import pytest

import etmetal_py
from etmetal_py import ffi, lib

ROOT = Path(__file__).resolve().parents[1]
HEADERS = sorted((ROOT / "native" / "include" / "etmetal").glob("*.h"))


def _load_export_list():
    """native/export_list.py, the build's own export list, loaded from its file: putting
    native/ on sys.path would add native/executorch to the `executorch` namespace package."""
    spec = importlib.util.spec_from_file_location("export_list", ROOT / "native" / "export_list.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


declared_functions = _load_export_list().declared_functions

DECLARED = declared_functions(HEADERS)


def exported_symbols():
    """Every symbol the library defines for others: only the C ABI may be there."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(etmetal_py.library_path())],
                         check=True, capture_output=True, text=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    return {n.lstrip("_") if sys.platform == "darwin" else n for n in names}


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_exported_symbols_are_the_declared_functions():
    expected = set(DECLARED)
    actual = exported_symbols()
    assert actual - expected == set(), "exported but declared in no public header"
    assert expected - actual == set(), "declared in a public header but not exported"


def test_export_list_has_every_function_a_c_parser_finds():
    # The export list and the check above share one parser; cffi's C parser, reading the same
    # headers for the Python binding, is an independent count of the declared functions.
    functions = {key.split(" ", 1)[1] for key in ffi._parser._declarations
                 if key.startswith("function ")}
    assert functions == set(DECLARED)


def torch_declarations():
    """name -> (return type, [parameter types]) from the torch wheel's C shim headers."""
    torch = pytest.importorskip("torch")
    base = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "inductor" / "aoti_torch"
    text = ""
    for header in ("c/shim.h", "c/shim_mps.h", "generated/c_shim_mps.h"):
        text += (base / header).read_text()
    text = re.sub(r"//[^\n]*", "", text)
    declarations = {}
    pattern = re.compile(r"AOTI_TORCH_EXPORT\s+([\w\s\*]+?)\s*\b(\w+)\s*\(([^;{]*?)\)\s*;", re.S)
    for ret, name, params in pattern.findall(text):
        types = []
        for param in re.split(r",(?![^(]*\))", params):  # not the commas of a function pointer's
            param = " ".join(param.split())
            if not param or param == "void":
                continue
            param = re.sub(r"\s*//.*", "", param)
            param = re.sub(r"\(\s*\*\s*\w+\s*\)", "(*)", param)  # a function pointer's name
            # Drop the parameter name: the last identifier unless the type ends in '*'.
            param = re.sub(r"\s*\b\w+$", "", param) if not param.endswith("*") else param
            types.append(param)
        declarations[name] = (" ".join(ret.split()), types)
    return declarations


TYPE_ALIASES = {
    # 16-bit floats travel as their bits: c10::Half and c10::BFloat16 hold exactly a uint16_t.
    "c10::Half": "uint16_t",
    "c10::BFloat16": "uint16_t",
    "AOTITorchError": "int32_t",
    "AtenTensorHandle": "struct AtenTensorOpaque *",
    "AtenGeneratorHandle": "struct AtenGeneratorOpaque *",
    "AOTIMetalKernelFunctionHandle": "struct AOTIMetalKernelFunctionOpaque *",
    "AOTIMetalShaderLibraryHandle": "struct AOTIMetalShaderLibraryOpaque *",
    "AOTIProxyExecutorHandle": "struct AOTIProxyExecutorOpaque *",
    "DeviceGuardHandle": "struct DeviceGuardOpaque *",
    "StreamHandle": "struct StreamOpaque *",
    "StableIValue": "uint64_t",
    "C10IValueHandle": "struct C10IValueOpaque *",
    "IValueMapHandle": "struct IValueMapOpaque *",
    "AtenRecordFunctionHandle": "struct AtenRecordFunctionOpaque *",
    "TorchLibraryHandle": "struct TorchLibraryOpaque *",
    "CUDAGuardHandle": "struct CUDAGuardOpaque *",
    "CUDAStreamGuardHandle": "struct CUDAStreamGuardOpaque *",
    "aoti_torch_mps_command_block_callback_t":
        "void(*)(struct AOTIMetalKernelFunctionOpaque *, void *)",
}


# c10::complex<T> is two Ts, real part first (etmetal/aoti_shim.h says why the structs agree).
COMPLEX_ALIASES = {
    "c10::complex<float>": "etmetal_complex64",
    "c10::complex<double>": "etmetal_complex128",
}


def normalize(ctype: str) -> str:
    # cffi reports types without const qualifiers; const does not change the ABI.
    ctype = re.sub(r"\bconst\b", "", ctype).replace("_Bool", "bool")
    for alias, real in COMPLEX_ALIASES.items():
        ctype = ctype.replace(alias, real)
    ctype = re.sub(r"\bunsigned\b(?! int)", "unsigned int", ctype)
    for alias, real in TYPE_ALIASES.items():
        ctype = re.sub(rf"\b{alias}\b", real, ctype)
    ctype = ctype.replace("*", " * ")
    return re.sub(r"\s+\(", "(", " ".join(ctype.split()))


def test_signatures_match_torch_headers():
    declarations = torch_declarations()
    for name in DECLARED:
        if name not in declarations:
            continue
        ret, params = declarations[name]
        ctype = ffi.typeof(getattr(lib, name))
        ours = [normalize(ffi.getctype(arg)) for arg in ctype.args]
        assert ours == [normalize(p) for p in params], name
        assert normalize(ffi.getctype(ctype.result)) == normalize(ret), name
    # An aoti_torch_* function torch does not declare is a custom op of etmetal's own,
    # declared in custom_ops.h, another library's op etmetal implements (fallback_experts.h), or
    # an aten op the compile route gives a C shim (etmetal_py.aoti.aten_shims: _fft_c2r ...).
    from etmetal_py.aoti.aten_shims import aten_op_c_shims

    aten_functions = {declaration.split("(")[0].split()[-1] for (declaration,) in aten_op_c_shims().values()}
    custom = "".join((ROOT / "native" / "include" / "etmetal" / name).read_text()
                     for name in ("custom_ops.h", "fallback_experts.h"))
    missing = [n for n in DECLARED
               if n.startswith("aoti_torch") and n not in declarations and n not in aten_functions
               and not re.search(rf"\b{n}\s*\(", custom)]
    assert missing == []


def test_every_dtype_and_device_getter_of_torch_is_exported():
    declarations = torch_declarations()
    getters = {n for n in declarations if re.match(r"aoti_torch_(dtype|device_type)_\w+$", n)}
    getters.discard("aoti_torch_dtype_element_size")
    exported = set(DECLARED)
    assert getters - exported == set()


def test_getter_values_are_c10_codes():
    import torch

    assert lib.aoti_torch_device_type_cpu() == 0
    assert lib.aoti_torch_device_type_cuda() == 1
    assert lib.aoti_torch_device_type_mps() == 13
    assert lib.aoti_torch_layout_strided() == 0
    names = ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
             "bool", "bfloat16", "uint16", "uint32", "uint64", "complex64", "complex128",
             "float8_e5m2", "float8_e4m3fn"]
    for name in names:
        dtype = getattr(torch, name)
        # torch has no public code accessor; element sizes and the known c10 order pin them.
        code = getattr(lib, f"aoti_torch_dtype_{name}")()
        if name in ("complex64", "complex128", "float8_e5m2", "float8_e4m3fn"):
            continue
        assert lib.aoti_torch_dtype_element_size(code) == dtype.itemsize, name
    expected_codes = {"uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5,
                      "float32": 6, "float64": 7, "complex32": 8, "complex64": 9,
                      "complex128": 10, "bool": 11, "bfloat16": 15, "float8_e5m2": 23,
                      "float8_e4m3fn": 24, "float8_e5m2fnuz": 25, "float8_e4m3fnuz": 26,
                      "uint16": 27, "uint32": 28, "uint64": 29, "float8_e8m0fnu": 44,
                      "float4_e2m1fn_x2": 45}
    for name, code in expected_codes.items():
        assert getattr(lib, f"aoti_torch_dtype_{name}")() == code, name


def test_element_size_of_unknown_dtype_is_zero_with_message():
    assert lib.aoti_torch_dtype_element_size(99) == 0
    assert "dtype" in etmetal_py.last_error()
    assert lib.aoti_torch_dtype_element_size(23) == 0  # float8_e5m2: not a tensor dtype here
    assert lib.aoti_torch_dtype_element_size(9) == 8  # complex64


def test_version_and_device():
    assert re.match(r"^\d+\.\d+\.\d+$", etmetal_py.__version__)
    assert etmetal_py.device_kind() in ("cpu", "metal")
    assert etmetal_py.device_name()


def test_grad_mode_is_per_thread():
    import threading

    assert lib.aoti_torch_grad_mode_is_enabled()
    lib.aoti_torch_grad_mode_set_enabled(False)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(lib.aoti_torch_grad_mode_is_enabled()))
    thread.start()
    thread.join()
    assert not lib.aoti_torch_grad_mode_is_enabled()
    lib.aoti_torch_grad_mode_set_enabled(True)
    assert seen == [True]
