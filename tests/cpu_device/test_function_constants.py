"""Function constants ([[function_constant(n)]], is_function_constant_defined): values given
at pipeline creation by index or name (etmetal_get_kernel_function_with_constants,
Library.function(name, constants=...)), each set of values its own pipeline."""

import textwrap

import numpy as np
import pytest

import etmetal_py
from cpu_device_testing import require_cpu_device
from etmetal_py.kernels import compile_library

SOURCE = textwrap.dedent("""\
    #include <metal_stdlib>
    using namespace metal;

    constant int scale [[function_constant(0)]];
    constant bool use_bias [[function_constant(1)]];
    constant float offset [[function_constant(2)]];
    constant half half_step [[function_constant(3)]];
    constant ushort repeat [[function_constant(4)]];
    constant bool has_offset = is_function_constant_defined(offset);

    kernel void affine(device float* out [[buffer(0)]], device const float* x [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
      float v = x[i] * scale;
      if (use_bias) v += 1.0f;
      if (has_offset) v += offset;
      if (metal::is_function_constant_defined(half_step)) {
        for (ushort k = 0; k < repeat; ++k) v += float(half_step);
      }
      out[i] = v;
    }
    """)


@pytest.fixture(scope="module")
def library():
    require_cpu_device()
    with compile_library(SOURCE) as compiled:
        yield compiled


def run(function, x):
    out = np.full_like(x, np.nan)
    function(out, x, threads=len(x))
    return out


def clear_sticky_error():
    try:
        etmetal_py.synchronize()
    except etmetal_py.EtmetalError:
        pass


X = np.arange(8, dtype=np.float32) - 3


@pytest.mark.parametrize("constants, expected", [
    ({0: 3, 1: True}, X * 3 + 1),
    ({0: 2, "use_bias": False, "offset": 0.5}, X * 2 + 0.5),
    ({"scale": -1, 1: np.bool_(True), 2: -2}, -X + 1 - 2),                     # int to float
    ({0: 1, 1: False, 3: 0.25, 4: 3}, X + 0.75),                               # half, ushort
    ({0: 1, 1: False, 3: 0.1, 4: np.uint16(1)}, X + np.float32(np.float16(0.1))),  # rounds to half
    ({}, X * 0),  # every constant undefined: zero, and is_function_constant_defined is false
])
def test_values_by_index_and_name(library, constants, expected):
    assert np.array_equal(run(library.function("affine", constants=constants), X), expected)


def test_each_set_of_values_is_its_own_pipeline(library):
    first = library.function("affine", constants={0: 3, 1: True})
    same = library.function("affine", constants={1: True, 0: 3})
    other = library.function("affine", constants={0: 4, 1: True})
    assert first.handle == same.handle  # the same values (in any order): the same kernel function
    assert first.handle != other.handle
    assert np.array_equal(run(other, X), X * 4 + 1)
    assert np.array_equal(run(first, X), X * 3 + 1)  # the first is not replaced by the second


@pytest.mark.parametrize("constants, words", [
    ({7: 1}, "no function constant at index 7"),
    ({"missing": 1}, "no function constant named 'missing'"),
    ({0: 2**31}, "'scale' (int) cannot hold 2147483648"),
    ({4: -1}, "'repeat' (ushort) cannot hold -1"),
    ({1: 1}, "'use_bias' (bool) needs a boolean value"),
    ({0: 1.5}, "'scale' (int) needs an integer value"),
    ({2: True}, "'offset' (float) needs a number"),
])
def test_bad_values_are_errors(library, constants, words):
    with pytest.raises(etmetal_py.EtmetalError) as error:
        library.function("affine", constants=constants)
    clear_sticky_error()
    assert words in str(error.value)


def test_python_keys_and_values_are_checked(library):
    with pytest.raises(TypeError):
        library.function("affine", constants={1.5: 1})
    with pytest.raises(TypeError):
        library.function("affine", constants={0: "3"})


@pytest.mark.parametrize("source, line, words", [
    ("constant bool on [[function_constant(0)]];\n"
     "kernel void k(device float* out [[buffer(0)]]) { out[0] = is_function_constant_defined(off); }\n",
     4, "'off' is not a function constant"),
    ("constant float3 v [[function_constant(0)]];\n", 3, "supports bool, integer, float, half and bfloat"),
    ("constant int n [[function_constant(N)]];\n", 3, "needs an integer literal index"),
])
def test_unsupported_declarations_are_errors_at_their_line(source, line, words):
    require_cpu_device()
    with pytest.raises(etmetal_py.EtmetalError) as error:
        compile_library("#include <metal_stdlib>\nusing namespace metal;\n" + source)
    clear_sticky_error()
    assert f"library.metal:{line}:" in str(error.value) and words in str(error.value)


def test_argument_that_exists_only_when_a_constant_is_true():
    # MLX's attention kernels: `[[buffer(n), function_constant(has_mask)]]` parameters.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        constant bool has_bias [[function_constant(0)]];
        kernel void twice(device float* out [[buffer(0)]], device const float* x [[buffer(1)]],
                          device const float* bias [[buffer(2), function_constant(has_bias)]],
                          uint i [[thread_position_in_grid]]) {
          out[i] = 2.0f * x[i] + (has_bias ? bias[i] : 0.0f);
        }
        """)
    bias = np.linspace(-1, 1, len(X), dtype=np.float32)
    with compile_library(source) as library:
        assert np.array_equal(run(library.function("twice", constants={"has_bias": False}), X), 2 * X)
        with_bias = np.full_like(X, np.nan)
        library.function("twice", constants={0: True})(with_bias, X, bias, threads=len(X))
        assert np.array_equal(with_bias, 2 * X + bias)
