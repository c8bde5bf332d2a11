"""shaders/params/: the parameter headers the ops' host code and kernels share. The host side
is checked by building libetmetal; these check the MSL side on the active device: the layout
check fires there too, and the kernels' strided-index helper indexes as numpy does."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import etmetal_py
from etmetal_py.kernels import compile_library

SHADERS = Path(__file__).resolve().parents[2] / "shaders"
COMMON = SHADERS / "params" / "common.h"


def source(layout: str) -> str:
    # The header's text inlined, as libetmetal does before a device compiles an op's shader.
    common = re.sub(r"(?m)^#pragma once\n", "", COMMON.read_text())
    return f"""#include <metal_stdlib>
using namespace metal;
{common}
struct Probe {{
  int64 strides[4];
  uint32 sizes[4];
  uint32 dims;
}};
{layout}

kernel void gather(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                   constant Probe& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {{
  out[i] = x[element_offset(i, p.sizes, p.strides, p.dims)];
}}
"""


def compile_error(layout: str) -> str:
    with pytest.raises(etmetal_py.EtmetalError) as error:
        compile_library(source(layout))
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()  # a failed creation also poisons the stream
    return str(error.value)


def test_a_layout_that_differs_fails_the_shader():
    # dims is at 48 (the size, 56, is right): the member offset is checked too.
    message = compile_error("ETM_PARAMS_LAYOUT(Probe, 56, dims, 52);")
    assert "Probe must have the same layout in C++ and MSL" in message


def test_element_offset_walks_any_strides():
    base = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    view = base.transpose(2, 0, 1)[1:, ::2, 1:]  # offset, transposed and strided: shape (5, 2, 4)
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 4
    probe = np.zeros(1, dtype=[("strides", "<i8", 4), ("sizes", "<u4", 4), ("dims", "<u4"), ("pad", "<u4")])
    probe["strides"][0, :3] = [s // 4 for s in view.strides]
    probe["sizes"][0, :3] = view.shape
    probe["dims"] = 3
    assert probe.itemsize == 56
    out = np.zeros(view.size, dtype=np.float32)
    with compile_library(source("ETM_PARAMS_LAYOUT(Probe, 56, dims, 48);")) as library:
        library.function("gather")(base.reshape(-1)[offset:], out, probe.view(np.uint8), threads=out.size)
    np.testing.assert_array_equal(out, view.reshape(-1))


def test_every_header_fits_one_translation_unit(tmp_path):
    # Host code may need two ops' parameters in one file (a fused path, a layout check): no two
    # headers may declare the same name.
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.fail("no host C++ compiler: libetmetal could not have been built either")
    unit = tmp_path / "all_params.cpp"
    unit.write_text("".join(f'#include "params/{header.name}"\n' for header in sorted((SHADERS / "params").glob("*.h"))))
    result = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", f"-I{SHADERS}", str(unit)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
