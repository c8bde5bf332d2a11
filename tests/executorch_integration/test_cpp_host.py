"""A plain C++ host (examples/executorch_host/run_pte.cpp) built against the executorch wheel's
headers and libexecutorch, with libetmetal_executorch linked in, loads Metal `.pte` programs
with ExecuTorch's Module API and runs them without Python."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from executorch_testing import LinearNorm, rewrite_pte, runtime
from etmetal_py.executorch import backend_library_path

# Builds a C++ host and exports programs (~33 s cold): the default run keeps the Python runtime's tests.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "examples" / "executorch_host" / "run_pte.cpp"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    runtime()  # skips when the backend library was not built
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    import executorch

    # executorch is a namespace package: the wheel's portion is the one holding the headers.
    prefix = next(Path(p) for p in executorch.__path__ if (Path(p) / "include" / "executorch").is_dir())
    backend = backend_library_path()
    binary = tmp_path_factory.mktemp("cpp_host") / "run_pte"
    rpath = ":".join(str(p) for p in (prefix / "lib", backend.parent))
    subprocess.run(
        ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1",
         "-isystem", str(prefix / "include"),
         "-isystem", str(prefix / "include/executorch/runtime/core/portable_type/c10"),
         "-DC10_USING_CUSTOM_GENERATED_MACROS", str(SOURCE), "-o", str(binary),
         f"-L{prefix / 'lib'}", "-lexecutorch",
         # Nothing in the host calls the backend: it registers itself when loaded.
         "-Wl,--no-as-needed", str(backend), f"-Wl,-rpath,{rpath}"],
        check=True, capture_output=True, text=True)
    return binary


def run_host(binary: Path, program: str, method: str, *inputs: torch.Tensor):
    text = "".join(f"{x.dim()} {' '.join(map(str, x.shape))} "
                   f"{' '.join(repr(float(v)) for v in x.flatten())}\n" for x in inputs)
    return subprocess.run([str(binary), program, method], input=text, capture_output=True,
                          text=True, timeout=600)


def parse_outputs(stdout: str) -> list[np.ndarray]:
    outputs = []
    for line in stdout.splitlines():
        fields = line.split()
        dim = int(fields[0])
        shape = [int(s) for s in fields[1:1 + dim]]
        outputs.append(np.array([float(v) for v in fields[1 + dim:]],
                                dtype=np.float32).reshape(shape))
    return outputs


def test_cpp_host_runs_a_metal_program(host, programs):
    x = torch.randn(3, 8)
    result = run_host(host, programs.get("two_methods"), "forward", x)
    assert result.returncode == 0, result.stdout + result.stderr
    (y,) = parse_outputs(result.stdout)
    np.testing.assert_allclose(y, LinearNorm().eval()(x).detach().numpy(), atol=1e-5, rtol=1e-5)


def test_cpp_host_gets_an_error_for_a_damaged_program(host, programs, tmp_path):
    def forget_weights(program, named):
        for key in [k for k in named if k.endswith("_weights_blob")]:
            del named[key]

    path = rewrite_pte(programs.get("two_methods"), str(tmp_path / "no_weights.pte"),
                       forget_weights)
    result = run_host(host, path, "forward", torch.randn(2, 8))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "load_method failed" in result.stdout
    assert "(the weights) is missing" in result.stderr
