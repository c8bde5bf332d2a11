"""ExecuTorch's own Metal module suite (executorch/backends/apple/metal/tests/test_modules.py
in the wheel): every module x float32/bfloat16, exported with etmetal_py.executorch.export_pte,
run by ExecuTorch's runtime through libetmetal_executorch, compared with eager CPU using the
suite's own tolerances. Quantized ("fpa4w") modules compare with the unquantized module where
the suite does, else with the quantized module in eager (torchao's op on CPU runs etmetal_py's
torch reference, not the Metal kernel). Each case is one AOTInductor compile: the sweep is
marked slow (tests/executorch_integration/test_runtime.py covers the path by default)."""

from __future__ import annotations

import pytest
import torch

from executorch_testing import runtime  # skips without the executorch extra

import etmetal_py.ops  # noqa: F401  (torchao's schemas, before the suite imports torchao's ops)
from etmetal_py.executorch import export_pte

suite = pytest.importorskip("executorch.backends.apple.metal.tests.test_modules")

pytestmark = pytest.mark.slow


def _cases():
    for name in suite.MODULE_REGISTRY:
        for dtype in suite.DTYPES:
            yield pytest.param(name, dtype, id=f"{name}-{suite.DTYPE_NAMES[dtype]}")


@pytest.mark.parametrize("name, dtype", list(_cases()))
def test_module_matches_eager(name, dtype, tmp_path):
    skip, reason = suite.should_skip_model(name, dtype)
    if skip:
        pytest.skip(reason)
    config = suite.MODULE_REGISTRY[name]
    torch.manual_seed(0)
    model, inputs = suite.get_model_and_inputs(name, dtype=dtype)
    with torch.no_grad():
        if config.get("qlinear") and config.get("compare_to_unquantized", True):
            torch.manual_seed(0)  # the weights the module had before quantization
            expected = config["model_class"]().eval().to(dtype)(*inputs)
        else:
            expected = model(*inputs)
    path = export_pte(model, inputs, tmp_path / f"{name}.pte")
    (actual,) = runtime().load_program(str(path)).load_method("forward").execute(list(inputs))
    atol, rtol = suite.get_tolerances_for_model(name, dtype)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
