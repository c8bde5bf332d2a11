"""How the ExecuTorch backend opens a model library (native/executorch/model_library.cpp):
with RTLD_DEEPBIND only when another library in the global scope defines an aoti_torch_*
name the model imports, so that the model always reaches libetmetal, and otherwise plainly
(deep binding bypasses interposed allocators, and sanitizers refuse it)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import etmetal_py
from etmetal_py.executorch.backend import BackendRegistrationError, backend_library_path
from etmetal_testing import build_host_program, library_objects

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="deep binding exists on Linux only")

MODEL = r"""
#include <stddef.h>
int aoti_torch_dtype_float32(void);
int AOTInductorModelContainerCreateWithDevice(void) { return 0; }
int AOTInductorModelContainerDelete(void) { return 0; }
int AOTInductorModelContainerGetNumOutputs(void) { return 0; }
int AOTInductorModelContainerRun(void) { return 0; }
int AOTInductorModelUpdateConstantsFromBlob(void) { return 0; }
int AOTInductorModelContainerGetNumInputs(void* container, size_t* count) {
  (void)container;
  *count = (size_t)aoti_torch_dtype_float32();
  return VARIANT;
}
"""
PLAIN = "#include <stdio.h>\nvoid greet(void) { puts(\"hello\"); }\n"
RIVAL = "int aoti_torch_dtype_float32(void) { return 99; }\n"


def shared_library(folder: Path, name: str, source: str, *flags: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    output = folder / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(folder / f"{name}.c"), *flags, "-o",
                    str(output)], check=True, capture_output=True, text=True)
    return output


def test_models_reach_libetmetal_and_are_deep_bound_only_beside_a_rival(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    try:
        backend = backend_library_path()
    except BackendRegistrationError as exc:
        pytest.skip(str(exc))
    runtime = Path(etmetal_py.library_path())
    links_runtime = (f"-L{runtime.parent}", "-letmetal", f"-Wl,-rpath,{runtime.parent}")
    model = shared_library(tmp_path, "model", MODEL, "-DVARIANT=0", *links_runtime)
    other_model = shared_library(tmp_path, "other_model", MODEL, "-DVARIANT=1", *links_runtime)
    plain = shared_library(tmp_path, "plain", PLAIN)
    rival = shared_library(tmp_path, "rival", RIVAL)
    host = build_host_program(Path(__file__).with_name("model_binding_host.cpp"),
                              library_objects("*model_library.cpp.o", library=backend),
                              tmp_path / "model_binding_host", extra=links_runtime)
    arguments = [str(host), str(model), str(other_model), str(plain), str(rival)]
    for mode, env, checks in (("plain", {}, 6), ("preloaded", {"LD_PRELOAD": str(rival)}, 3)):
        result = subprocess.run([*arguments, mode], capture_output=True, text=True, timeout=120,
                                env=dict(os.environ, **env))
        assert result.returncode == 0 and "FAILED" not in result.stdout, result.stdout + result.stderr
        assert result.stdout.count("ok ") == checks, result.stdout
