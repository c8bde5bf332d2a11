"""The real-model sweep (tools/sweep_models.py) as a slow test: each architecture, built from a
small transformers config with random weights, exports, compiles, loads and matches torch eager
on CPU through etmetal, each in its own child process."""

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "tools"))

import sweep_models  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", [spec.name for spec in sweep_models.SPECS])
def test_model_compiles_loads_and_matches_eager(name):
    pytest.importorskip("transformers", reason="the sweep needs transformers (pip install transformers)")
    with tempfile.TemporaryDirectory(prefix="etmetal-sweep-") as folder:
        result = sweep_models.run_in_child(name, folder, timeout=1200)
    assert result.compiled and result.loaded and result.matched, result.error
