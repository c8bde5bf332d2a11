"""Shared fixtures: the binding, and a leak check on the allocator's live bytes."""

import gc

import pytest

import etmetal_py
from etmetal_py import ffi, lib


def allocator_stats():
    stats = ffi.new("etmetal_allocator_stats_t*")
    etmetal_py.check(lib.etmetal_allocator_stats(stats))
    return stats


@pytest.fixture
def no_leaks():
    """Fails the test if device memory it allocated is still live when it ends."""
    etmetal_py.synchronize()
    gc.collect()
    before = allocator_stats()
    live_bytes, live_allocations = before.live_bytes, before.live_allocations
    yield
    etmetal_py.synchronize()
    gc.collect()
    after = allocator_stats()
    assert (after.live_bytes, after.live_allocations) == (live_bytes, live_allocations)


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
