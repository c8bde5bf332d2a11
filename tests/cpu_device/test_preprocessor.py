"""The translator's preprocessor stage: conditional groups decided as Apple's compiler would
(its predefined macros, the source's own #defines in order), dead branches invisible to the
translator, kernel-producing macros expanded after that, line numbers unchanged."""

import re
import textwrap

import numpy as np
import pytest

import etmetal_py
from cpu_device_testing import require_cpu_device
from etmetal_py.kernels import compile_library

HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"

KERNEL = ("kernel void {name}(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) "
          "{{ out[i] = {value}; }}")


def run_one(source, name, count=4):
    require_cpu_device()
    out = np.zeros(count, dtype=np.float32)
    with compile_library(source) as library:
        library.function(name)(out, threads=count)
    return out


def compile_error(source):
    require_cpu_device()
    with pytest.raises(etmetal_py.EtmetalError) as error:
        compile_library(source)
    try:
        etmetal_py.synchronize()  # a failed creation also poisons the stream
    except etmetal_py.EtmetalError:
        pass
    return str(error.value)


def kernel_names(library):
    """The kernels the translator found (listed by the error for an absent name)."""
    with pytest.raises(etmetal_py.EtmetalError) as error:
        library.function("no_such_kernel")
    try:
        etmetal_py.synchronize()
    except etmetal_py.EtmetalError:
        pass
    listed = re.search(r"it has: ([^)]*)\)", str(error.value)).group(1)
    return set(listed.split(", "))


def test_kernel_macro_defined_in_both_branches_takes_the_live_one():
    source = HEADER + textwrap.dedent("""\
        #if 1
        #define MAKE_KERNEL(name, v) kernel void name(device float* out [[buffer(0)]], \\
                                                      uint i [[thread_position_in_grid]]) { out[i] = v; }
        #else
        #define MAKE_KERNEL(name, v) kernel void name(device float* out [[buffer(0)]], \\
                                                      uint i [[thread_position_in_grid]]) { out[i] = 1.0f; }
        #endif
        MAKE_KERNEL(fill, 2.0f)
        """)
    assert np.array_equal(run_one(source, "fill"), np.full(4, 2.0, np.float32))


# (condition, what a C preprocessor with Apple's predefined macros for MSL 4.0 decides);
# the source defines LOCAL_VALUE as 3, TWICE(x) as ((x) * 2), and defines then undefines GONE.
CONDITIONS = [
    ("1", True),
    ("0", False),
    ("defined(__METAL__)", True),
    ("defined __METAL_MACOS__", True),
    ("__METAL_VERSION__ >= 310", True),
    ("__METAL_VERSION__ == 400", True),
    ("defined(__HAVE_BFLOAT__)", True),
    ("defined(__HAVE_NATIVE_DOUBLE__)", False),
    ("defined(__HAVE_TENSOR__)", False),
    ("UNDEFINED_NAME", False),
    ("UNDEFINED_NAME == 0", True),
    ("!defined(UNDEFINED_NAME)", True),
    ("(2 + 3 * 4) == 14 && (2 + 3) * 4 == 20", True),
    ("-1 < 0", True),
    ("-1 < 0u", False),
    ("1 << 4 == 16 && 256 >> 4 == 16", True),
    ("10 / 3 == 3 && 10 % 3 == 1 && -7 / 2 == -3", True),
    ("0x10 == 16 && 010 == 8 && 0b11 == 3 && 1'000 == 1000", True),
    ("1 ? 0 : 1", False),
    ("(0, 1)", True),
    ("~0 == -1 && (5 & 3) == 1 && (5 | 3) == 7 && (5 ^ 3) == 6", True),
    ("'A' == 65", True),
    ("true && !false", True),
    ("LOCAL_VALUE > 2", True),
    ("TWICE(LOCAL_VALUE) == 6", True),
    ("defined(TWICE) && !defined(GONE)", True),
    ("defined(M_PI_F)", True),  # defined by <metal_math>, which every kernel source sees
]


def test_conditions_decide_which_kernels_exist():
    require_cpu_device()
    lines = [HEADER, "#define LOCAL_VALUE 3", "#define TWICE(x) ((x) * 2)", "#define GONE 1", "#undef GONE"]
    for index, (condition, _) in enumerate(CONDITIONS):
        lines += [f"#if {condition}", KERNEL.format(name=f"c{index}_yes", value="1.0f"),
                  "#else", KERNEL.format(name=f"c{index}_no", value="0.0f"), "#endif"]
    with compile_library("\n".join(lines) + "\n") as library:
        names = kernel_names(library)
    for index, (condition, expected) in enumerate(CONDITIONS):
        assert (f"c{index}_yes" in names) == expected, condition
        assert (f"c{index}_no" in names) == (not expected), condition


def test_ifdef_elif_chains_nesting_and_definitions_in_dead_branches():
    require_cpu_device()
    source = HEADER + textwrap.dedent("""\
        #if 0
        #define FROM_DEAD_BRANCH 1
        #endif
        #ifdef FROM_DEAD_BRANCH
        KERNEL(wrong_dead_define)
        #endif
        #define LEVEL 2
        #if LEVEL == 1
        KERNEL(level_one)
        #elif LEVEL == 2
        #  ifndef __METAL__
        KERNEL(nested_wrong)
        #  elif __METAL_VERSION__ < 300
        KERNEL(old_metal)
        #  else
        KERNEL(level_two)
        #  endif
        #elif LEVEL == 2
        KERNEL(second_match_wrong)
        #else
        KERNEL(level_other)
        #endif
        #undef LEVEL
        #ifndef LEVEL
        KERNEL(after_undef)
        #endif
        """).replace("KERNEL(", "KERNEL_OF(")
    source = source.replace(HEADER, HEADER + "#define KERNEL_OF(n) " + KERNEL.format(name="n", value="1.0f") + "\n")
    with compile_library(source) as library:
        assert kernel_names(library) == {"level_two", "after_undef"}


def test_metal_version_selects_the_bfloat_branch():
    # MLX's bf16.h pattern: bfloat16_t is the native bfloat from MSL 3.1.
    source = HEADER + textwrap.dedent("""\
        #if __METAL_VERSION__ >= 310
        typedef bfloat bfloat16_t;
        #else
        typedef half bfloat16_t;
        #endif
        kernel void width(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          // 1 + 2^-9 is exact in half, rounds to 1 in bfloat (8 significand bits).
          out[i] = float(bfloat16_t(1.0f + 0.001953125f));
        }
        """)
    assert np.array_equal(run_one(source, "width"), np.ones(4, np.float32))


def test_live_error_directive_fails_and_dead_one_does_not():
    message = compile_error(HEADER + "#if __METAL_VERSION__ >= 310\n#error needs an older Metal\n#endif\n")
    assert "library.metal:4:" in message and "needs an older Metal" in message
    source = HEADER + "#if !defined(__METAL__)\n#error not Metal\n#endif\n" + KERNEL.format(name="k", value="5.0f")
    assert np.array_equal(run_one(source, "k"), np.full(4, 5.0, np.float32))


@pytest.mark.parametrize("body, line, words", [
    ("#if 1\n#else\n#else\n#endif\n", 5, "#else after #else"),
    ("#endif\n", 3, "#endif without #if"),
    ("#if 1\n#if 0\n#endif\n", 3, "unterminated #if"),
    ("#if 1 +\n#endif\n", 3, "ends early"),
    ("#if 1 / 0\n#endif\n", 3, "division by zero"),
    ("#ifdef\n#endif\n", 3, "needs one macro name"),
])
def test_malformed_conditionals_are_errors_at_their_line(body, line, words):
    message = compile_error(HEADER + body)
    assert f"library.metal:{line}:" in message and words in message


def test_line_numbers_survive_removed_branches():
    message = compile_error(HEADER + textwrap.dedent("""\
        #if 0
        this is not C++ at all
        #define A \\
          continued
        #endif
        kernel void k(device float* out [[buffer(0)]]) {
          out[0] = missing_name;
        }
        """))
    assert "library.metal:9:" in message and "missing_name" in message


@pytest.mark.parametrize("condition", ["__has_include(<metal_stdlib>)", "defined(__cpp_variable_templates)",
                                       "__cplusplus >= 201402L"])
def test_conditions_the_host_compiler_decides_stay_for_it(condition):
    source = HEADER + textwrap.dedent(f"""\
        #if {condition}
        #define VALUE 7.0f
        #else
        #define VALUE 8.0f
        #endif
        """) + KERNEL.format(name="k", value="VALUE")
    assert np.array_equal(run_one(source, "k"), np.full(4, 7.0, np.float32))
