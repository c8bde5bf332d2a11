"""The c10/metal headers of the installed torch wheel compile through the emulated library,
as Inductor-generated MSL includes them."""

import subprocess

import pytest

from metal_stdlib_build import METAL_INCLUDE, compiler, torch_include

# indexing.h (ATen's own kernels, never included by Inductor) overloads functions on
# `constant void*` versus `device void*`. Those stay distinct only after the MSL translator's
# rewrite of `constant` to `const`, which no macro can do (error.h's `constant const char*`
# would become a duplicate const), so indexing.h cannot compile as a plain #include.
DIRECTLY_INCLUDED_EXCLUSIONS = {"indexing.h"}


def c10_headers():
    headers = sorted(p.name for p in (torch_include() / "c10" / "metal").glob("*.h"))
    assert "utils.h" in headers and "reduction_utils.h" in headers, headers
    return headers


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_every_c10_metal_header_compiles(std, tmp_path):
    source = tmp_path / "c10_all.cpp"
    lines = ["#include <metal_stdlib>"]
    lines += [f"#include <c10/metal/{name}>" for name in c10_headers()
              if name not in DIRECTLY_INCLUDED_EXCLUSIONS]
    source.write_text("\n".join(lines) + "\n")
    command = [compiler(), f"-std={std}", "-fsyntax-only", "-fsingle-precision-constant",
               f"-I{METAL_INCLUDE}", f"-I{torch_include()}", str(source)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-8000:]
