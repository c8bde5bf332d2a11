"""Fixtures of the AOTInductor tests (helpers live in aoti_testing.py)."""

import pytest

from aoti_testing import PackageCache


@pytest.fixture(scope="session")
def packages(tmp_path_factory) -> PackageCache:
    return PackageCache(str(tmp_path_factory.mktemp("aoti_packages")))
