"""The shim.h functions added for torch 2.13's full c/shim.h: layout codes and the ABI version
(against torch's own headers), tensor_copy_, _mm_plus_mm_out, empty_strided_pinned and the
complex scalars (against torch eager), check_inf_and_nan, print_tensor_handle, IValues and
record_function scopes (in the dispatch trace), and the functions that only fail clearly."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails, new_handle_out

ROOT = Path(__file__).resolve().parents[1]
TORCH_INCLUDE = Path(torch.__file__).parent / "include"


def device(x):
    return Tensor.from_array(x.contiguous(), copy=True)


def test_layout_codes_follow_c10s_enum():
    text = (TORCH_INCLUDE / "torch" / "headeronly" / "core" / "Layout.h").read_text()
    body = re.search(r"enum class Layout : int8_t \{(.*?)\}", text, re.S).group(1)
    names = [n.strip() for n in body.split(",") if n.strip()]
    functions = {"Strided": "strided", "Sparse": "sparse_coo", "SparseCsr": "sparse_csr", "Mkldnn": "_mkldnn",
                 "SparseCsc": "sparse_csc", "SparseBsr": "sparse_bsr", "SparseBsc": "sparse_bsc",
                 "Jagged": "jagged"}
    for code, name in enumerate(names[:-1]):  # the last is NumOptions
        assert getattr(lib, f"aoti_torch_layout_{functions[name]}")() == code, name


def test_abi_version_is_torchs():
    text = (TORCH_INCLUDE / "torch" / "headeronly" / "version.h").read_text()
    part = {key: int(re.search(rf"#define TORCH_VERSION_{key} (\d+)", text).group(1))
            for key in ("MAJOR", "MINOR", "PATCH", "ABI_TAG")}
    expected = part["MAJOR"] << 56 | part["MINOR"] << 48 | part["PATCH"] << 40 | part["ABI_TAG"]
    assert lib.aoti_torch_abi_version() == expected
    assert torch.__version__.startswith(f"{part['MAJOR']}.{part['MINOR']}.{part['PATCH']}")


def test_tensor_copy_converts_and_follows_strides():
    src = torch.randn(5, 6)
    source = device(src)
    view = new_handle_out()  # src.t(): a strided view
    etmetal_py.check(lib.aoti_torch__reinterpret_tensor(source.handle, 2, ffi.new("int64_t[]", [6, 5]),
                                                        ffi.new("int64_t[]", [1, 6]), 0, view))
    view = Tensor(view[0])
    dst = Tensor.empty([6, 5], dtype=torch.float16)
    etmetal_py.check(lib.aoti_torch_tensor_copy_(view.handle, dst.handle))
    assert torch.equal(dst.torch(), src.t().to(torch.float16))
    fails(lib.aoti_torch_tensor_copy_(ffi.NULL, dst.handle), "aoti_torch_tensor_copy_")


def test_mm_plus_mm_out_matches_torch():
    torch.manual_seed(0)
    a, b, c, d = torch.randn(7, 9), torch.randn(9, 5), torch.randn(7, 3), torch.randn(3, 5)
    out = Tensor.empty([7, 5])
    args = [device(t) for t in (a, b, c, d)]
    etmetal_py.check(lib.aoti_torch__mm_plus_mm_out(out.handle, *(t.handle for t in args)))
    torch.testing.assert_close(out.torch(), torch.mm(a, b).addmm_(c, d),  # torch's _mm_plus_mm_out
                               atol=1e-5, rtol=1e-5)
    fails(lib.aoti_torch__mm_plus_mm_out(out.handle, args[0].handle, args[0].handle, args[2].handle,
                                         args[3].handle), "aoti_torch__mm_plus_mm_out")
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()  # an encoding call: the failure poisoned the stream


def test_empty_strided_pinned_is_host_memory():
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_empty_strided_pinned(2, ffi.new("int64_t[]", [3, 4]), ffi.new("int64_t[]", [1, 3]),
                                                         6, 0, 0, out))
    t = Tensor(out[0])
    device_type = ffi.new("int32_t*")
    etmetal_py.check(lib.aoti_torch_get_device_type(t.handle, device_type))
    assert (t.sizes, t.strides, device_type[0]) == ((3, 4), (1, 3), 0)
    fails(lib.aoti_torch_empty_strided_pinned(1, ffi.new("int64_t[]", [3]), ffi.NULL, 6, 13, 0, out),
          "aoti_torch_empty_strided_pinned", "device_type must be cpu")


def test_complex_scalars_by_value_and_item():
    out = new_handle_out()
    etmetal_py.check(lib.aoti_torch_scalar_to_tensor_complex64({"real": 1.5, "imag": -2.25}, out))
    t = Tensor(out[0]).torch()
    assert t.dtype == torch.complex64 and t.shape == () and t.item() == complex(1.5, -2.25)
    etmetal_py.check(lib.aoti_torch_scalar_to_tensor_complex128({"real": 1e300, "imag": 1 / 3}, out))
    t = Tensor(out[0]).torch()
    assert t.dtype == torch.complex128 and t.item() == complex(1e300, 1 / 3)
    value = ffi.new("etmetal_complex64*")
    source = device(torch.tensor([3.0 - 4.0j], dtype=torch.complex64))  # kept alive across the call
    etmetal_py.check(lib.aoti_torch_item_complex64(source.handle, value))
    assert (value.real, value.imag) == (3.0, -4.0)
    real = device(torch.tensor([7.5]))  # converted as torch's copy_: (7.5, 0)
    etmetal_py.check(lib.aoti_torch_item_complex64(real.handle, value))
    assert (value.real, value.imag) == (7.5, 0.0)
    two = device(torch.zeros(2))
    fails(lib.aoti_torch_item_complex64(two.handle, value), "no single value")


def test_check_inf_and_nan():
    cases = [(b"clean", torch.randn(50), None), (b"ints", torch.arange(5), None),
             (b"buf3", torch.tensor([1.0, float("inf"), float("nan")]), "At least one NaN in buf3"),
             (b"x", torch.tensor([-float("inf")]).half(), "At least one INF in x"),
             (b"z", torch.tensor([1 + float("nan") * 1j]), "At least one NaN in z")]
    for name, values, error in cases:
        tensor = device(values)
        code = lib.aoti_torch_check_inf_and_nan(name, tensor.handle)
        if error is None:
            assert code == 0, etmetal_py.last_error()
        else:
            fails(code, "aoti_torch_check_inf_and_nan", error)
    etmetal_py.synchronize()  # a check, not an encoding: the stream stays usable


def test_print_tensor_handle(capfd):
    x = torch.tensor([[1.0, -2.0, 3.5], [0.0, 4.0, -1.5]])
    tensor = device(x)
    lib.aoti_torch_print_tensor_handle(tensor.handle, b"after kernel 7")
    printed = capfd.readouterr().out
    assert "[  after kernel 7  ]:" in printed
    assert "Values: [1, -2, 3.5, 0, 4, -1.5]" in printed
    for line in ("Number of elements: 6", "Dtype: float32", f"Mean value: {x.mean().item():g}",
                 "Min value: -2", "Max value: 4", "Size: [2, 3]", "Stride: [3, 1]", "Is contiguous: 1"):
        assert line in printed, line
    lib.aoti_torch_print_tensor_handle(ffi.NULL, b"gone")
    assert "[  gone  ]:" in capfd.readouterr().out and "null tensor handle" in etmetal_py.last_error()


TRACE_SCRIPT = r"""
import numpy as np
from etmetal_py import Tensor, ffi, lib, check
ivalues = []
ones = Tensor.from_array(np.ones(3, np.float32), copy=True)
for make, arg in ((lib.aoti_torch_int64_to_ivalue, 42), (lib.aoti_torch_str_to_ivalue, b"grid"),
                  (lib.aoti_torch_tensor_to_ivalue, ones.handle)):
    h = ffi.new("C10IValueHandle*")
    check(make(arg, h))
    ivalues.append(h[0])
names = [ffi.new("char[]", b"a"), ffi.new("char[]", b"b")]
h = ffi.new("C10IValueHandle*")
check(lib.aoti_torch_strlist_to_ivalue(ffi.new("char*[]", names), 2, h))
ivalues.append(h[0])
guard = ffi.new("AtenRecordFunctionHandle*")
check(lib.aoti_record_function_start(b"my_kernel_scope", ffi.NULL, ffi.new("C10IValueHandle[]", ivalues), 4, guard))
check(lib.aoti_record_function_end(guard[0]))
assert lib.aoti_record_function_end(guard[0]) == 1  # ended once
for value in ivalues:
    check(lib.aoti_torch_delete_c10_value_object(value))
assert lib.aoti_torch_delete_c10_value_object(ivalues[0]) == 1  # freed once
stale = ffi.new("AtenRecordFunctionHandle*")
assert lib.aoti_record_function_start(b"x", ffi.NULL, ffi.new("C10IValueHandle[]", ivalues[:1]), 1, stale) == 1
"""


@pytest.mark.slow  # a fresh process, for ETMETAL_TRACE (read once): ~10 s on 2 busy cores
def test_record_function_scopes_land_in_the_trace(tmp_path):
    trace = tmp_path / "trace.json"
    env = dict(os.environ, ETMETAL_TRACE=str(trace), PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", TRACE_SCRIPT], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    events = json.loads(trace.read_text())
    spans = [e for e in events if e.get("cat") == "record_function"]
    assert [(e["name"], e["args"]["inputs"]) for e in spans] == [("my_kernel_scope", 4)]
    assert spans[0]["dur"] >= 0


REFUSED = {  # function: (arguments, words of its message)
    "aoti_torch_library_init_impl": ((b"ns", b"CPU", b"f.cpp", 1, ffi.NULL), "dispatcher"),
    "aoti_torch_library_init_def": ((b"ns", b"f.cpp", 1, ffi.NULL), "dispatcher"),
    "aoti_torch_library_init_fragment": ((b"ns", b"f.cpp", 1, ffi.NULL), "dispatcher"),
    "aoti_torch_library_impl": ((ffi.NULL, b"op", ffi.NULL), "dispatcher"),
    "aoti_torch_library_def": ((ffi.NULL, b"op(Tensor x) -> Tensor"), "dispatcher"),
    "aoti_torch_delete_library_object": ((ffi.NULL,), "dispatcher"),
    "aoti_torch_cpu_wrapped_fbgemm_pack_gemm_matrix_fp16": ((ffi.NULL, ffi.NULL), "fbgemm"),
    "aoti_torch_cpu__wrapped_linear_prepack": ((ffi.NULL,) * 5, "fbgemm"),
    "aoti_torch_cpu_wrapped_fbgemm_linear_fp16_weight": ((ffi.NULL, ffi.NULL, ffi.NULL, 4, ffi.NULL), "fbgemm"),
    "aoti_torch_cpu__wrapped_quantized_linear_prepacked": ((ffi.NULL,) * 6 + (4, ffi.NULL), "fbgemm"),
    "aoti_torch_create_cuda_guard": ((0, ffi.NULL), "CUDA"),
    "aoti_torch_delete_cuda_guard": ((ffi.NULL,), "CUDA"),
    "aoti_torch_cuda_guard_set_index": ((ffi.NULL, 0), "CUDA"),
    "aoti_torch_create_cuda_stream_guard": ((ffi.NULL, 0, ffi.NULL), "CUDA"),
    "aoti_torch_delete_cuda_stream_guard": ((ffi.NULL,), "CUDA"),
    "aoti_torch_get_current_cuda_stream": ((0, ffi.NULL), "CUDA"),
    "aoti_torch_cuda_caching_allocator_raw_alloc": ((16, ffi.NULL), "CUDA"),
    "aoti_torch_cuda_caching_allocator_raw_delete": ((ffi.NULL,), "CUDA"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unavailable_functions_fail_clearly_and_the_process_goes_on(name):
    arguments, words = REFUSED[name]
    fails(getattr(lib, name)(*arguments), name, "not available in etmetal", words)
    with pytest.raises(etmetal_py.EtmetalError, match=name):
        etmetal_py.synchronize()
    assert torch.equal(device(torch.arange(4.0)).torch(), torch.arange(4.0))


def test_save_tensor_handle_reports_instead_of_saving():
    tensor = device(torch.ones(2))
    lib.aoti_torch_save_tensor_handle(tensor.handle, b"buf0", b"before_launch", b"kernel_3")
    message = etmetal_py.last_error()
    assert "aoti_torch_save_tensor_handle" in message and "cannot save buf0" in message
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()
