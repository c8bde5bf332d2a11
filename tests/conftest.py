"""Shared fixtures: a leak check on the allocator's live bytes."""

import gc

import pytest

import etmetal_py
from etmetal_testing import allocator_stats


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
