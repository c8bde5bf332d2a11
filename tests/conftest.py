"""Shared fixtures: a leak check on the allocator's live bytes. The skip policy: with
--strict-skips (CI), a skip whose "test id: reason" matches no line of expected_skips.txt
fails the test, so a suite cannot pass by quietly testing nothing."""

import gc
import re
from pathlib import Path

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


def pytest_addoption(parser):
    parser.addoption("--strict-skips", action="store_true",
                     help="fail skips that tests/expected_skips.txt does not allow")


def _expected_skips():
    patterns = []
    for line in (Path(__file__).parent / "expected_skips.txt").read_text().splitlines():
        pattern = line.split(" #", 1)[0].strip()
        if pattern and not line.lstrip().startswith("#"):
            patterns.append(re.compile(pattern))
    return patterns


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not item.config.getoption("--strict-skips"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    subject = f"{item.nodeid}: {reason}"
    if any(pattern.search(subject) for pattern in _expected_skips()):
        return
    report.outcome = "failed"
    report.longrepr = f"unexpected skip (not in tests/expected_skips.txt): {subject}"
