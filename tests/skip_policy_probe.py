"""Collected only when named on the command line (tests/test_skip_policy.py runs it)."""

import pytest


def test_skips_quietly():
    pytest.skip("nothing to test here")
