"""Compile limits of the CPU device: a runaway host compile is stopped after
ETMETAL_COMPILE_TIMEOUT_S with a clear error, and compile errors cite their MSL line."""

import textwrap

import pytest

import etmetal_py
from cpu_device_testing import require_cpu_device
from etmetal_py.kernels import compile_library

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"


def compile_error(source):
    require_cpu_device()
    with pytest.raises(etmetal_py.EtmetalError) as error:
        compile_library(source)
    try:
        etmetal_py.synchronize()  # a failed creation also poisons the stream
    except etmetal_py.EtmetalError:
        pass
    return str(error.value)


def test_runaway_compile_is_stopped(monkeypatch):
    # g++ spends minutes on 10^5 nested parentheses (found by fuzzing).
    monkeypatch.setenv("ETMETAL_COMPILE_TIMEOUT_S", "2")
    depth = 100_000
    source = HEADER + ("kernel void deep(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) "
                       "{ out[i] = " + "(" * depth + "1.0f" + ")" * depth + "; }\n")
    message = compile_error(source)
    assert "did not finish within 2 s" in message and "ETMETAL_COMPILE_TIMEOUT_S" in message


def test_deeply_nested_preprocessor_condition_is_an_error_not_a_crash():
    message = compile_error(HEADER + "#if " + "(" * 100_000 + "1" + ")" * 100_000 + "\n#endif\n")
    assert "library.metal:3:" in message and "nests deeper" in message


@pytest.mark.parametrize("source, line", [
    ("kernel void k(device float* out [[buffer(0)]]) { out[0] = 1.0f; }\n/* never closed\n", 4),
    ("kernel void k(device float* out [[buffer(0)]]) { out[0] = 'x; }\n", 3),
])
def test_lexical_errors_cite_the_line(source, line):
    assert f"library.metal:{line}:" in compile_error(HEADER + source)


def test_threadgroup_memory_limit_error_cites_the_kernel_line():
    message = compile_error(HEADER + textwrap.dedent("""\
        kernel void hungry(device float* out [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {
          threadgroup float big[9000];
          big[i] = 1.0f;
          threadgroup_barrier(mem_flags::mem_threadgroup);
          out[i] = big[(i + 1) % 9000];
        }
        """))
    assert "library.metal:3:" in message and "threadgroup memory" in message
