"""The kernel sanitizer (ETMETAL_VALIDATE=1): the cases in validated_cases.py run in a child
process that has the flag from its start (it selects how kernels are compiled)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def run_cases(selection, **settings):
    env = dict(os.environ, ETMETAL_VALIDATE="1", **settings)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", selection,
                             str(HERE / "validated_cases.py")],
                            cwd=HERE.parents[1], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout


def test_validated_cases_in_a_validating_process():
    run_cases("not slow")


@pytest.mark.slow
def test_every_validated_case():
    run_cases("slow")


@pytest.mark.slow
def test_every_validated_case_on_fibers():
    run_cases("slow or not slow", ETMETAL_CPU_EXECUTION="fibers")
