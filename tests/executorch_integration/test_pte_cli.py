"""`etmetal export` and `etmetal run model.pte`."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from executorch_testing import LinearNorm, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_MODEL = os.path.join(ROOT, "tests", "aoti", "cli_model.py")


def etmetal(*args: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "etmetal_py", *args], capture_output=True,
                          text=True, env=environment, timeout=900)


def test_run_prints_outputs_and_saves_them(programs, tmp_path):
    runtime()  # skips when the backend library is not built
    x = torch.randn(6, 8)
    np.savez(tmp_path / "in.npz", x=x.numpy())
    result = etmetal("run", programs.get("two_methods"), "--method", "forward",
                     "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                     "--repeat", "3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "output0: float32 (6, 16)" in result.stdout
    assert "latency over 3 run(s)" in result.stdout
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["output0"], LinearNorm().eval()(x).detach().numpy(),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # ~11 s: exports a program of its own and starts a CLI process
def test_run_names_a_missing_method(programs):
    runtime()
    result = etmetal("run", programs.get("two_methods"), "--method", "decode")
    assert result.returncode == 2
    assert "has no method 'decode'" in result.stderr


@pytest.mark.slow
def test_export_then_run(tmp_path):
    runtime()
    output = str(tmp_path / "model.pte")
    result = etmetal("export", f"{CLI_MODEL}:build", "--input", "3x100",
                     "--input", "5:int64", "-o", output)
    assert result.returncode == 0, result.stderr[-2000:]
    assert os.path.isfile(output) and "ExecuTorch Metal program" in result.stdout
    result = etmetal("run", output, "--repeat", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "output0: float32 (3, 100)" in result.stdout and "output1: int64 ()" in result.stdout
