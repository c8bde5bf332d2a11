"""Fixtures of the ExecuTorch tests (helpers live in executorch_testing.py)."""

import pytest

from executorch_testing import ProgramCache


@pytest.fixture(scope="session")
def programs(tmp_path_factory) -> ProgramCache:
    return ProgramCache(str(tmp_path_factory.mktemp("executorch_programs")))
