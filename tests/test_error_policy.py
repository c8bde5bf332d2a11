"""One error policy: a failure's message is "<C function>: <reason>", the function named once
(also when etmetal_synchronize reports an earlier call's sticky error, and when Python raises
it); etmetal_last_error() describes the thread's most recent failure and later successes leave
it alone, as etmetal.h says."""

import re

import pytest

import etmetal_py
from etmetal_testing import empty
from etmetal_py import ffi, lib

C_FUNCTION = re.compile(r"\b(aoti_torch_\w+|etmetal_\w+|metal_\w+)\s*:")


def names_in(message):
    return C_FUNCTION.findall(message)


def test_last_error_describes_the_most_recent_failure():
    assert lib.aoti_torch_get_numel(ffi.NULL, ffi.new("int64_t*")) == 1
    first = etmetal_py.last_error()
    assert first.startswith("aoti_torch_get_numel: null tensor handle")
    h = empty([3])
    try:
        numel = ffi.new("int64_t*")
        assert lib.aoti_torch_get_numel(h, numel) == 0
        assert lib.etmetal_synchronize(0) == 0
        assert etmetal_py.last_error() == first  # successes leave it alone
        assert lib.metal_allocate_buffer(-1) == ffi.NULL
        assert names_in(etmetal_py.last_error()) == ["metal_allocate_buffer"]
    finally:
        lib.aoti_torch_delete_tensor_object(h)


def test_a_sticky_error_keeps_the_name_of_the_call_that_failed():
    src = ffi.new("void**")
    etmetal_py.check(lib.aoti_torch_mps_malloc(src, 16))
    try:
        # Generated code ignores this return code; the next synchronize reports it.
        assert lib.aoti_torch_mps_copy_buffer(src[0], src[0], 32, 0, 0) == 1
        assert lib.etmetal_synchronize(2) == 1
        message = etmetal_py.last_error()
        assert names_in(message) == ["aoti_torch_mps_copy_buffer"], message
        assert lib.etmetal_synchronize(2) == 0  # reported once, then cleared
        assert lib.aoti_torch_mps_copy_buffer(src[0], src[0], 32, 0, 0) == 1
        with pytest.raises(etmetal_py.EtmetalError) as raised:
            etmetal_py.synchronize()
        assert names_in(str(raised.value)) == ["aoti_torch_mps_copy_buffer"], str(raised.value)
    finally:
        lib.aoti_torch_mps_free(src[0])


def test_python_adds_the_function_name_only_when_the_library_did_not():
    with pytest.raises(etmetal_py.EtmetalError) as raised:
        etmetal_py.check(lib.aoti_torch_get_dim(ffi.NULL, ffi.new("int64_t*")), "aoti_torch_get_dim")
    assert str(raised.value).count("aoti_torch_get_dim") == 1
    with pytest.raises(etmetal_py.EtmetalError) as raised:
        etmetal_py.check(lib.aoti_torch_get_dim(ffi.NULL, ffi.new("int64_t*")), "my kernel")
    assert str(raised.value).startswith("my kernel: aoti_torch_get_dim: ")
