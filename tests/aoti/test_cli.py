"""The `etmetal` command line, run in-process through cli.main and once as a subprocess."""

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import cli_model
from aoti_testing import require_shader_compiler
from etmetal_py import cli

MODEL_FILE = os.path.join(os.path.dirname(__file__), "cli_model.py")


def run_cli(capsys, *arguments):
    status = cli.main(list(arguments))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def cli_package(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cli") / "softmax.pt2")
    status = cli.main(["compile", f"{MODEL_FILE}:build", "--input", "batch=4x100",
                       "--input", "batch=4x3:int64", "--dynamic", "batch=1:32", "--gpu-cores", "16",
                       "-o", path])
    assert status == 0
    return path


def test_compile_writes_a_package_with_a_dynamic_batch(cli_package):
    import json

    with zipfile.ZipFile(cli_package) as archive:
        signature = json.loads(archive.read("softmax/etmetal/signature.json"))
    shapes = [(i["dtype"], i["shape"], i["strides"], i["ranges"]) for i in signature["inputs"]]
    assert shapes == [("float32", [None, 100], None, {"0": [1, 32]}),
                      ("int64", [None, 3], None, {"0": [1, 32]})]
    assert [(o["dtype"], o["shape"]) for o in signature["outputs"]] == [
        ("float32", [None, 100]), ("int64", [])]
    assert signature["gpu_cores"] == 16


def test_run_prints_outputs_and_latency_and_saves_them(cli_package, tmp_path, capsys):
    require_shader_compiler()
    inputs = tmp_path / "in.npz"
    x = np.random.default_rng(0).standard_normal((5, 100)).astype(np.float32)
    tokens = np.arange(15, dtype=np.int64).reshape(5, 3)
    np.savez(inputs, x, tokens)
    outputs = tmp_path / "out.npz"
    status, out, err = run_cli(capsys, "run", cli_package, "--inputs", str(inputs),
                               "--output", str(outputs), "--repeat", "3")
    assert status == 0, err
    assert "output0: float32 (5, 100)" in out and "output1: int64 ()" in out
    assert "latency over 3 run(s)" in out and "median" in out
    expected_softmax, expected_total = cli_model.build()(torch.from_numpy(x),
                                                         torch.from_numpy(tokens))
    saved = np.load(outputs)
    np.testing.assert_allclose(saved["output0"], expected_softmax.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    assert int(saved["output1"]) == int(expected_total) == 120
    assert f"sum={float(expected_total):.6g}" in out.splitlines()[2]


def test_run_makes_random_inputs_from_the_signature(cli_package, capsys):
    require_shader_compiler()
    status, out, err = run_cli(capsys, "run", cli_package, "--repeat", "1")
    assert status == 0, err
    # dynamic batch without inputs: the smallest size of at least 2 in the exported range
    assert "output0: float32 (2, 100)" in out


@pytest.mark.parametrize("arguments, message", [
    (["run", "missing.pt2"], "no such package"),
    (["run", "PACKAGE", "--repeat", "0"], "--repeat"),
    (["compile", "cli_model_absent_module:build", "--input", "4", "-o", "x.pt2"],
     "cannot import module"),
    (["compile", "MODEL:nothing_here", "--input", "4", "-o", "x.pt2"], "no attribute"),
    (["compile", "MODEL:not_a_model", "--input", "4", "-o", "x.pt2"], "not a torch.nn.Module"),
    (["compile", "MODEL:build", "--input", "4x?", "-o", "x.pt2"], "bad size"),
    (["compile", "MODEL:build", "--input", "4:complex7", "-o", "x.pt2"], "unknown dtype"),
    (["compile", "MODEL:build", "--input", "4", "-o", "x.zip"], "must end in .pt2"),
    (["compile", "MODEL:build", "--input", "4", "--dynamic", "batch", "-o", "x.pt2"],
     "no --input names a dimension"),
    (["compile", "MODEL:build", "-o", "x.pt2"], "--input"),
    (["frobnicate"], "invalid choice"),
    ([], "a command is required"),
])
def test_bad_arguments_give_one_line_and_status_2(arguments, message, cli_package, capsys):
    arguments = [cli_package if a == "PACKAGE" else f"{MODEL_FILE}" if a == "MODEL" else
                 f"{MODEL_FILE}:{a.split(':', 1)[1]}" if a.startswith("MODEL:") else a
                 for a in arguments]
    status, out, err = run_cli(capsys, *arguments)
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("etmetal: error: ")


def test_too_few_inputs_give_one_line_and_status_1(cli_package, tmp_path, capsys):
    inputs = tmp_path / "one.npz"
    np.savez(inputs, np.zeros((2, 100), np.float32))
    status, out, err = run_cli(capsys, "run", cli_package, "--inputs", str(inputs))
    assert status == 1
    assert err.strip() == "etmetal: error: the model takes 2 tensor input(s), got 1"


def test_a_broken_package_gives_one_line_and_status_1(tmp_path, capsys):
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"PK\x03\x04 definitely not a whole archive")
    status, out, err = run_cli(capsys, "run", str(broken))
    assert status == 1
    assert "not a .pt2 package" in err and len(err.strip().splitlines()) == 1


def test_info_and_module_entry_point_run_as_a_subprocess():
    environment = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment["PYTHONPATH"] = root + os.pathsep + environment.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "etmetal_py", "info"], capture_output=True,
                            text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "library:" in result.stdout and "device:" in result.stdout
    missing = subprocess.run([sys.executable, "-m", "etmetal_py", "run", "/nonexistent.pt2"],
                             capture_output=True, text=True, env=environment, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip() == "etmetal: error: no such package: /nonexistent.pt2"
    assert "Traceback" not in missing.stderr


@pytest.mark.slow
def test_demo_compiles_runs_and_matches_eager(capsys):
    status, out, err = run_cli(capsys, "demo", "--repeat", "3")
    assert status == 0, out + err
    assert "max abs error" in out and out.rstrip().endswith("OK")
