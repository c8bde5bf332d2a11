"""libetmetal and libtorch in one process: a model compiled by etmetal binds to libetmetal, a
stock torch AOTI package binds to libtorch, in either load order, from Python and from C.

Each scenario runs in a child process: the failure this guards against (one library's
`aoti_torch_*` interposing on the other's) aborts the process."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

import etmetal_py
from aoti_testing import require_shader_compiler
from etmetal_py.aoti import aoti_compile_and_package, export
from etmetal_py.aoti._symbols import needed_libraries

ROOT = Path(__file__).resolve().parents[2]
_COMPILER = shutil.which("cc") or shutil.which("gcc")


class AffineModel(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


@pytest.fixture(scope="module")
def two_packages(tmp_path_factory):
    """(etmetal package, stock torch CPU package) of the same model."""
    require_shader_compiler()
    folder = tmp_path_factory.mktemp("coexistence")
    example = (torch.arange(8, dtype=torch.float32),)
    etmetal_package = aoti_compile_and_package(export(AffineModel(), example),
                                               package_path=str(folder / "etmetal.pt2"))
    program = torch.export.export(AffineModel(), example)
    torch_package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(folder / "torch_cpu.pt2"))
    return etmetal_package, torch_package


def run_child(script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    return result.stdout


_CHECKS = """
import sys, torch
x = torch.arange(8, dtype=torch.float32)

def check(model):
    out = model(x)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert torch.equal(out, x * 2 + 1), out
"""

_TORCH_FIRST = _CHECKS + """
stock = torch._inductor.aoti_load_package(sys.argv[2])
check(stock)
import etmetal_py
runner = etmetal_py.aoti_load_package(sys.argv[1])
check(runner)
check(stock)
runner.close()
print("ok")
"""

_ETMETAL_FIRST = _CHECKS + """
import etmetal_py
runner = etmetal_py.aoti_load_package(sys.argv[1])
check(runner)
stock = torch._inductor.aoti_load_package(sys.argv[2])
check(stock)
check(runner)
runner.close()
print("ok")
"""


def test_etmetal_models_link_libetmetal(two_packages):
    etmetal_package, _ = two_packages
    with tempfile.TemporaryDirectory() as folder:
        needed = needed_libraries(_extract_library(etmetal_package, Path(folder), "model.so"))
    if needed is None:
        pytest.skip("not an ELF platform")
    assert "libetmetal.so" in needed
    assert not any("torch" in name or "c10" in name for name in needed)


def test_python_stock_torch_package_then_etmetal(two_packages):
    assert run_child(_TORCH_FIRST, *two_packages).strip() == "ok"


def test_python_etmetal_then_stock_torch_package(two_packages):
    assert run_child(_ETMETAL_FIRST, *two_packages).strip() == "ok"


# A C host that holds both runtimes: libtorch in the global scope (the worst case: its
# aoti_torch_* would interpose on anything loaded after it) and libetmetal loaded locally.
# It runs each package's model .so through the container API, in the order given.
C_HOST = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void* Handle;
typedef int32_t (*create_fn)(void**, size_t, const char*, const char*);
typedef int32_t (*run_fn)(void*, Handle*, size_t, Handle*, size_t, void*, void*);
typedef int32_t (*delete_container_fn)(void*);
typedef int32_t (*from_blob_fn)(void*, int64_t, const int64_t*, const int64_t*, int64_t, int32_t,
                                int32_t, int32_t, Handle*);
typedef int32_t (*empty_fn)(int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t,
                            Handle*);
typedef int32_t (*data_fn)(Handle, void**);
typedef int32_t (*delete_fn)(Handle);
typedef int32_t (*sync_fn)(int);

static void* need(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (!p) { fprintf(stderr, "missing %s\n", name); _exit(3); }
  return p;
}

/* Runs y = 2x + 1 through one model library; `runtime` provides the tensor functions. */
static int run(const char* model_path, void* runtime, int deep, const char* device) {
  void* model = dlopen(model_path, RTLD_NOW | RTLD_LOCAL | (deep ? RTLD_DEEPBIND : 0));
  if (!model) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 10; }
  create_fn create = (create_fn)need(model, "AOTInductorModelContainerCreateWithDevice");
  run_fn run_model = (run_fn)need(model, "AOTInductorModelContainerRun");
  delete_container_fn destroy = (delete_container_fn)need(model, "AOTInductorModelContainerDelete");
  data_fn data_ptr = (data_fn)need(runtime, "aoti_torch_get_data_ptr");
  delete_fn delete_tensor = (delete_fn)need(runtime, "aoti_torch_delete_tensor_object");
  int64_t sizes[1] = {8}, strides[1] = {1};
  float values[8];
  for (int i = 0; i < 8; ++i) values[i] = (float)i;
  Handle input = NULL, output = NULL;
  int is_mps = strcmp(device, "mps") == 0;
  if (is_mps) {
    empty_fn empty = (empty_fn)need(runtime, "aoti_torch_empty_strided");
    if (empty(1, sizes, strides, 6, 13, 0, &input)) return 11;
    void* p; data_ptr(input, &p); memcpy(p, values, sizeof values);
  } else {
    from_blob_fn from_blob = (from_blob_fn)need(runtime, "aoti_torch_create_tensor_from_blob");
    if (from_blob(values, 1, sizes, strides, 0, 6, 0, 0, &input)) return 12;
  }
  void* container = NULL;
  if (create(&container, 1, device, NULL)) return 13;
  if (run_model(container, &input, 1, &output, 1, NULL, NULL)) return 14;
  if (is_mps && ((sync_fn)need(runtime, "etmetal_synchronize"))(2)) return 15;
  float* y; data_ptr(output, (void**)&y);
  for (int i = 0; i < 8; ++i) if (y[i] != 2.0f * i + 1.0f) { fprintf(stderr, "%s: y[%d]=%g\n", device, i, y[i]); return 16; }
  delete_tensor(output);
  destroy(container);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const char *etmetal_lib = argv[1], *torch_lib = argv[2], *etmetal_model = argv[3],
             *torch_model = argv[4], *order = argv[5];
  void* torch_rt = dlopen(torch_lib, RTLD_NOW | RTLD_GLOBAL);
  if (!torch_rt) { fprintf(stderr, "libtorch: %s\n", dlerror()); return 4; }
  void* etmetal_rt = dlopen(etmetal_lib, RTLD_NOW | RTLD_LOCAL);
  if (!etmetal_rt) { fprintf(stderr, "libetmetal: %s\n", dlerror()); return 5; }
  for (const char* step = order; *step; ++step) {
    int code = *step == 'e' ? run(etmetal_model, etmetal_rt, 1, "mps") : run(torch_model, torch_rt, 0, "cpu");
    if (code) return code;
  }
  puts("ok");
  return 0;
}
"""


def _extract_library(package: str, folder: Path, name: str) -> str:
    with zipfile.ZipFile(package) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".so"))
        target = folder / name
        target.write_bytes(archive.read(member))
    return str(target)


@pytest.mark.skipif(_COMPILER is None or sys.platform == "darwin",
                    reason="needs a C compiler and an ELF platform")
@pytest.mark.parametrize("order", [pytest.param("te", marks=pytest.mark.slow),
                                   pytest.param("et", marks=pytest.mark.slow), "ete"])
def test_c_host_with_libtorch_global_and_libetmetal_local(two_packages, tmp_path, order):
    etmetal_package, torch_package = two_packages
    source = tmp_path / "host.c"
    source.write_text(C_HOST)
    binary = tmp_path / "host"
    subprocess.run([_COMPILER, "-std=c11", str(source), "-ldl", "-o", str(binary)], check=True)
    libtorch = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    etmetal_model = _extract_library(etmetal_package, tmp_path, "etmetal_model.so")
    torch_model = _extract_library(torch_package, tmp_path, "torch_model.so")
    result = subprocess.run([str(binary), str(etmetal_py.library_path()), str(libtorch),
                             etmetal_model, torch_model, order],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", \
        (result.returncode, result.stderr[-3000:])
