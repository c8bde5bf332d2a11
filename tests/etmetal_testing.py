"""Helpers for tests that drive the C ABI through etmetal_py (imported by test modules)."""

import etmetal_py
from etmetal_py import ffi, lib


def allocator_stats():
    stats = ffi.new("etmetal_allocator_stats_t*")
    etmetal_py.check(lib.etmetal_allocator_stats(stats))
    return stats



def new_handle_out():
    return ffi.new("AtenTensorHandle*")


def empty(sizes, strides=None, dtype=6, device=13):
    """A raw handle from aoti_torch_empty_strided (caller deletes)."""
    out = new_handle_out()
    c_strides = ffi.NULL if strides is None else ffi.new("int64_t[]", list(strides))
    etmetal_py.check(lib.aoti_torch_empty_strided(len(sizes), ffi.new("int64_t[]", list(sizes)),
                                                  c_strides, dtype, device, 0, out))
    return out[0]


def fails(code, *fragments):
    """Asserts a call failed (code 1) with a message containing every fragment."""
    assert code == 1
    message = etmetal_py.last_error()
    for fragment in fragments:
        assert fragment in message, message
    return message
