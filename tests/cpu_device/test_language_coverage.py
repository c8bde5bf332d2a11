"""MSL constructs that real kernel corpora (MLX's kernels) use, as minimal snippets."""

import textwrap

import numpy as np

from cpu_device_testing import require_cpu_device
from etmetal_py.kernels import compile_library


def test_kernel_templates_with_default_template_arguments():
    # A default template argument (`int N = 4`) once made the translator swallow the next
    # kernel template ("instantiation of unknown kernel template").
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        #define instantiate_kernel(name, func, ...) \\
          template [[host_name(name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
        template <typename T, int N = 2>
        [[kernel]] void scale_first(device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = T(N) * out[i];
        }
        template <typename T, typename U = float, int N = 3>
        [[kernel]] void scale_second(device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = T(U(N) * float(out[i]));
        }
        instantiate_kernel("first_float", scale_first, float)
        instantiate_kernel("second_float", scale_second, float)
        instantiate_kernel("second_int_5", scale_second, int, float, 5)
        """)
    with compile_library(source) as library:
        values = np.arange(6, dtype=np.float32)
        first, second = values.copy(), values.copy()
        library.function("first_float")(first, threads=6)
        library.function("second_float")(second, threads=6)
        integers = np.arange(6, dtype=np.int32)
        library.function("second_int_5")(integers, threads=6)
    assert np.array_equal(first, values * 2)
    assert np.array_equal(second, values * 3)
    assert np.array_equal(integers, np.arange(6, dtype=np.int32) * 5)
