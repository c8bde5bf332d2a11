"""tools/abi_coverage.py: coverage of torch's C shim headers as numbers, and every function
etmetal's public headers declare (its claim) exported by the library."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "abi_coverage.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("abi_coverage", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_declared_function_is_exported(tool):
    assert tool.claimed_but_missing(tool.load_library()) == []


def test_a_declared_function_that_is_not_exported_is_reported(tool, monkeypatch):
    declared = tool.etmetal_header_functions()
    declared["custom_ops.h"] = declared["custom_ops.h"] + ["aoti_torch_mps_not_implemented_anywhere"]
    monkeypatch.setattr(tool, "etmetal_header_functions", lambda: declared)
    library = tool.load_library()
    assert tool.claimed_but_missing(library) == ["aoti_torch_mps_not_implemented_anywhere"]
    assert "aoti_torch_mps_not_implemented_anywhere" in tool.coverage(library)["etmetal custom ops"]["missing"]


def test_coverage_rows(tool):
    rows = tool.coverage(tool.load_library())
    for row, data in rows.items():
        assert data["covered"] + len(data["missing"]) == data["total"], row
        assert data["implemented"] + len(data["refused"]) == data["covered"], row
    # What cannot exist without libtorch, CUDA or fbgemm is exported but counted apart.
    refused = set(rows["shim.h"]["refused"])
    assert {"aoti_torch_call_dispatcher", "aoti_torch_proxy_executor_call_function",
            "aoti_torch_create_cuda_guard", "aoti_torch_library_def"} <= refused
    assert not refused & {"aoti_torch_tensor_copy_", "aoti_torch_check_inf_and_nan", "aoti_torch_empty_strided"}
    assert rows["c_shim_mps.h"]["refused"] == []
    # The kernel-launch header and the project's own custom ops are complete.
    assert rows["shim_mps.h"]["missing"] == []
    assert rows["etmetal custom ops"]["missing"] == []
    assert rows["c_shim_mps.h (forward)"]["total"] < rows["c_shim_mps.h"]["total"]
    assert "aoti_torch_mps_mm_out" not in rows["c_shim_mps.h"]["missing"]
    assert not any(name.endswith("_backward") for name in tool.torch_functions("generated/c_shim_mps.h")
                   if tool.is_forward(name))


def test_command_line_prints_the_table():
    result = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split("  ")[0].strip() for line in lines[:5]] == [
        "shim.h", "shim_mps.h", "c_shim_mps.h", "c_shim_mps.h (forward)", "etmetal custom ops"]
