"""Device-memory traffic counters (ETMETAL_COUNTERS=1): the cases in counted_cases.py run in a
child process that has the flag from its start; here, that counting is refused without it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import etmetal_py

HERE = Path(__file__).resolve().parent


def test_counted_cases_in_a_counting_process():
    env = dict(os.environ, ETMETAL_COUNTERS="1")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(HERE / "counted_cases.py")],
                            cwd=HERE.parents[1], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout


@pytest.mark.skipif(os.environ.get("ETMETAL_COUNTERS") == "1", reason="this process counts")
def test_counting_needs_the_flag():
    with pytest.raises(etmetal_py.EtmetalError, match="ETMETAL_COUNTERS=1"):
        with etmetal_py.counters():
            pass
