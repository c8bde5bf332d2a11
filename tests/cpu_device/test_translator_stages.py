"""The translator's front-end stages as tables, MSL in -> what each stage decides out, without
compiling a kernel: the lexer's tokens, the preprocessor's live lines, overload sets, function
constants, the kernels and arguments the translator binds, its barrier-region decisions and its
diagnostics (message and MSL line). One C++ host (translator_stages_driver.cpp, linked with the
library's objects) runs every case in one process."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from etmetal_testing import build_host_program, library_objects

KERNEL_HEAD = "kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]])"


def buffer(name, index, type, space, writable=True, by_reference=False, optional=False):
    return {"name": name, "kind": "buffer", "index": index, "type": type, "address_space": space,
            "by_reference": by_reference, "writable": writable, "optional": optional, "attribute": ""}


def attribute(name, attribute, type):
    return {"name": name, "kind": "thread_attribute", "index": 0, "type": type, "address_space": "",
            "by_reference": False, "writable": True, "optional": False, "attribute": attribute}


def threadgroup(name, index, type):
    return {"name": name, "kind": "threadgroup_memory", "index": index, "type": type,
            "address_space": "threadgroup", "by_reference": False, "writable": True, "optional": False,
            "attribute": ""}


OUT = buffer("out", 0, "device float *", "device")
POSITION = attribute("i", "thread_position_in_grid", "uint")

# ---------------------------------------------------------------- cases
# Each case: (id, stage, MSL, check) where check(result) asserts; tables below build them.

LEX = [
    # (MSL, [(kind, text, line)])
    ("a += b >> 2;", [("identifier", "a", 1), ("punctuator", "+=", 1), ("identifier", "b", 1),
                      ("punctuator", ">>", 1), ("number", "2", 1), ("punctuator", ";", 1)]),
    ("#define N \\\n  4\nx /* a\nb */ y // z\n",
     [("directive", "#define N \\\n  4", 1), ("identifier", "x", 3), ("identifier", "y", 4)]),
    ("u8\"s\" 'c' 1.5e-3f .5 0x1Fu", [("literal", 'u8"s"', 1), ("literal", "'c'", 1),
                                      ("number", "1.5e-3f", 1), ("number", ".5", 1), ("number", "0x1Fu", 1)]),
    ('R"x(a\n)")x" z', [("literal", 'R"x(a\n)")x"', 1), ("identifier", "z", 2)]),
]

LEX_ERRORS = [
    # (MSL, error)
    ("a\n/* open", "2: unterminated comment"),
    ('x = "abc\n";', "1: unterminated literal"),
    ('R"abc', "1: malformed raw string literal"),
]

PREPROCESS = [
    # (MSL, lines that stay, lines that become blank); lines count from 1.
    ("#if __METAL_VERSION__ >= 310\nint a;\n#else\nint b;\n#endif\n", ["int a;"], ["int b;"]),
    ("#ifdef __HAVE_BFLOAT__\nint a;\n#endif\n#ifndef __METAL__\nint b;\n#endif\n", ["int a;"], ["int b;"]),
    ("#define X 2\n#if X == 1\nint a;\n#elif X == 2\nint b;\n#else\nint c;\n#endif\n", ["int b;"],
     ["int a;", "int c;"]),
    ("#if defined(FOO) || !defined(__METAL_MACOS__)\nint a;\n#endif\n#define FOO\n#if defined FOO\nint b;\n#endif\n",
     ["int b;"], ["int a;"]),
    # What only the host compiler knows stays, and every branch of it stays visible.
    ("#if __has_include(<foo.h>)\nint a;\n#else\nint b;\n#endif\n",
     ["#if __has_include(<foo.h>)", "int a;", "int b;"], []),
    ("#if 0\n#error never\n#endif\nint a;\n", ["int a;"], ["#error never"]),
]

PREPROCESS_EXPANSION = [
    # A macro that produces a kernel is expanded in place, on its line, in the live branch.
    ("#if 1\n#define MAKE(n, v) kernel void n(device float* o [[buffer(0)]]) { o[0] = v; }\n#else\n"
     "#define MAKE(n, v) kernel void n(device float* o [[buffer(0)]]) { o[0] = 1; }\n#endif\nMAKE(k, 2)\n",
     6, ["kernel void k (", "o [ 0 ] = 2 ;"]),
]

PREPROCESS_ERRORS = [
    # (MSL, message): every message names library.metal:LINE.
    ("int a;\n#endif\n", "library.metal:2: #endif without #if"),
    ("#if 1\nint a;\n", "library.metal:1: unterminated #if"),
    ("#if 1\n#else\n#elif 2\n#endif\n", "library.metal:3: #elif after #else"),
    ("int a;\n#error stop here\n", "library.metal:2: #error stop here"),
    ("#if 1 / 0\n#endif\n", "library.metal:1: #if: division by zero in #if"),
    ("#if (1\n#endif\n", "library.metal:1: #if: expected ')' in #if"),
    ("#ifdef\n#endif\n", "library.metal:1: #ifdef needs one macro name"),
    ("\n#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n",
     "library.metal:2: MetalPerformancePrimitives is not supported by the CPU device"),
]

OVERLOADS = [
    # (MSL, fragments that stay, fragments that go)
    ("void f(device float& a) {}\nvoid f(thread float& a) {}\nvoid f(threadgroup float& a) {}\n",
     ["void f(thread float& a) {}"], ["device float& a", "threadgroup float& a"]),
    # `constant` is `const`: it overloads in C++ and stays.
    ("void g(constant float& a) {}\nvoid g(device float& a) {}\n",
     ["void g(constant float& a) {}", "void g(device float& a) {}"], []),
    ("struct c { c() threadgroup {} c() {} };\n", ["c() {}"], ["threadgroup {}"]),
    # Different signatures are no overload set.
    ("void h(device float& a) {}\nvoid h(device int& a) {}\n",
     ["void h(device float& a) {}", "void h(device int& a) {}"], []),
]

ARM = ("static_cast<::etm_msl::conditional_arm_t<void(::etm_msl::type_tag<decltype(({}))>, "
       "::etm_msl::type_tag<decltype(({}))>)>>({})")

CONDITIONALS = [
    # (MSL, fragments that appear, fragments that go); sources that name no bfloat stay as they are.
    ("bfloat b;\nauto v = c ? b : f(x, y);\n",
     ["c ? " + ARM.format("b", "f(x, y)", "b") + " : " + ARM.format("f(x, y)", "b", "f(x, y)") + ";"], []),
    # Nested: the inner conditional is rewritten inside the outer one's arms; a lone number stays
    # (a null pointer constant must stay one); line breaks stay.
    ("bfloat b;\nauto v = p ? b\n  : q ? 0 : b;\n",
     ["p ? " + ARM.format("b", "q ? 0 : " + ARM.format("b", "0", "b"), "b") + "\n  : "], ["q ? b"]),
    # Arguments and template arguments: the third operand ends at `,` or `)`; a `,` after an
    # unmatched `<` or an unmatched `>` leaves the extent unknown, so it stays.
    ("bfloat b;\nf(c ? b : d, e);\ng(c ? b : h<1, 2>(x));\nauto t = k<c ? 1 : 2>();\n",
     ["f(c ? " + ARM.format("b", "d", "b"), "g(c ? b : h<1, 2>(x));", "k<c ? 1 : 2>()"], []),
    # Attributes, directives and lambdas stay as written.
    ("bfloat b;\n[[max_total_threads_per_threadgroup(N > 4 ? 4 : N)]] void f();\n#if A ? 1 : 0\n#endif\n"
     "auto m = c ? [&] { return b; }() : b;\n",
     ["(N > 4 ? 4 : N)", "#if A ? 1 : 0", "c ? [&] { return b; }() : b;"], ["static_cast"]),
    ("float f;\nauto v = c ? f : 1.0f;\n", ["auto v = c ? f : 1.0f;"], ["static_cast"]),
    # A line comment inside an operand is left out of its one-line copies.
    ("bfloat b;\nauto v = c ? f(a, // first\n  b) : d;\n",
     ["decltype((f(a,    b)))", "(f(a, // first\n  b))"], []),
    # In a macro argument the cast must add no comma outside parentheses.
    ("bfloat b;\nOP(name, c ? b : x, <, >);\n", ["OP(name, c ? " + ARM.format("b", "x", "b")], []),
]

CONSTANTS = [
    # (MSL, constants, fragments of the rewritten text)
    ("constant bool has_bias [[function_constant(0)]];\nconstant uint n [[function_constant(3)]];\n"
     "int f() { return is_function_constant_defined(n) ? 1 : 0; }\n",
     [{"name": "has_bias", "index": 0, "type": "bool"}, {"name": "n", "index": 3, "type": "uint"}],
     ["constexpr bool has_bias = static_cast<bool>(ETM_FC_VALUE_0);",
      "constexpr uint n = static_cast<uint>(ETM_FC_VALUE_3);", "(ETM_FC_PRESENT_3 != 0)"]),
]

CONSTANT_ERRORS = [
    ("constant float4 v [[function_constant(0)]];\n", "library.metal:1: function constant 'v' has type 'float4'; the CPU device supports "
     "bool, integer, float, half and bfloat scalars"),
    ("device bool b [[function_constant(0)]];\n",
     "library.metal:1: a function constant must be declared in the constant address space"),
    ("constant bool a [[function_constant(0)]];\nconstant bool a [[function_constant(1)]];\n",
     "library.metal:2: function constant 'a' is declared twice"),
    ("constant bool a [[function_constant(x)]];\n",
     "library.metal:1: [[function_constant(n)]] needs an integer literal index"),
    ("int f() { return is_function_constant_defined(q); }\n",
     "library.metal:1: 'q' is not a function constant declared before this use"),
]

TRANSLATE = [
    # (id, MSL, [(kernel name, line, max threads, arguments)])
    ("plain", KERNEL_HEAD + " { out[i] = 1; }\n", [("k", 1, 0, [OUT, POSITION])]),
    ("bindings",
     "kernel void k(const device float* a [[buffer(2)]], constant uint& n [[buffer(0)]],\n"
     "              device float* b, constant int64_t strides[2], threadgroup float* t [[threadgroup(1)]],\n"
     "              ushort2 tid [[thread_position_in_threadgroup]], uint3 g [[threadgroup_position_in_grid]]) {}\n",
     [("k", 1, 0, [buffer("a", 2, "const device float *", "device", writable=False),
                   buffer("n", 0, "const uint &", "constant", writable=False, by_reference=True),
                   buffer("b", 1, "device float *", "device"),
                   buffer("strides", 3, "const int64_t *", "constant", writable=False),
                   threadgroup("t", 1, "threadgroup float *"),
                   attribute("tid", "thread_position_in_threadgroup", "ushort2"),
                   attribute("g", "threadgroup_position_in_grid", "uint3")])]),
    ("host_name_and_max_threads",
     "[[kernel, max_total_threads_per_threadgroup(256)]] void f(device float* out [[buffer(0)]]) {}\n"
     "[[host_name(\"renamed\")]] kernel void g(device float* out [[buffer(0)]]) {}\n",
     [("f", 1, 256, [OUT]), ("renamed", 2, 0, [OUT])]),
    ("template_instantiations",
     "template <typename T, int N = 2>\n"
     "kernel void add(device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] += N; }\n"
     "template [[host_name(\"add_f\")]] kernel void add<float>(device float*, uint);\n"
     "template [[host_name(\"add_i4\")]] [[kernel]] decltype(add<int, 4>) add<int, 4>;\n",
     [("add_f", 3, 0, [buffer("out", 0, "device T *", "device"), POSITION]),
      ("add_i4", 4, 0, [buffer("out", 0, "device T *", "device"), POSITION])]),
    ("deduced_instantiation",
     "template <typename T>\n"
     "kernel void copy(device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = 0; }\n"
     "template [[host_name(\"copy_h\")]] kernel void copy(device half* out [[buffer(0)]], uint i);\n",
     [("copy_h", 3, 0, [buffer("out", 0, "device T *", "device"), POSITION])]),
    ("namespaced_template",
     "namespace a { template <typename T> kernel void z(device T* out [[buffer(0)]]) {} }\n"
     "namespace b { template <typename T> kernel void z(device T* out [[buffer(0)]]) {} }\n"
     "template [[host_name(\"za\")]] kernel void a::z<float>(device float*);\n"
     "template [[host_name(\"zb\")]] kernel void b::z<float>(device float*);\n",
     [("za", 3, 0, [buffer("out", 0, "device T *", "device")]),
      ("zb", 4, 0, [buffer("out", 0, "device T *", "device")])]),
    ("optional_buffer",
     "constant bool has_bias [[function_constant(0)]];\n"
     "kernel void k(device float* out [[buffer(0)]], const device float* bias [[buffer(1), function_constant(has_bias)]]) {}\n",
     [("k", 2, 0, [OUT, buffer("bias", 1, "const device float *", "device", writable=False, optional=True)])]),
    ("macro_made",
     "#define ADD(name, T) template [[host_name(#name)]] kernel void add<T>(device T*);\n"
     "template <typename T> kernel void add(device T* out [[buffer(0)]]) {}\n"
     "ADD(add_float, float)\nADD(add_int, int)\n",
     [("add_float", 3, 0, [buffer("out", 0, "device T *", "device")]),
      ("add_int", 4, 0, [buffer("out", 0, "device T *", "device")])]),
    ("dead_branch_kernel",
     "#if __METAL_VERSION__ < 200\nkernel void old(device float* out [[buffer(0)]]) {}\n#endif\n"
     + KERNEL_HEAD + " {}\n",
     [("k", 4, 0, [OUT, POSITION])]),
]

TRANSLATE_ERRORS = [
    # (id, MSL, message)
    ("unknown_template", "template [[host_name(\"x\")]] kernel void nope<float>(device float*);\n",
     "library.metal:1: instantiation of unknown kernel template 'nope'"),
    ("instantiation_without_host_name",
     "template <typename T> kernel void t(device T* o [[buffer(0)]]) {}\ntemplate kernel void t<float>(device float*);\n",
     "library.metal:2: kernel instantiation of 't' needs [[host_name(\"...\")]]"),
    ("duplicate_names",
     "kernel void k(device float* o [[buffer(0)]]) {}\n[[host_name(\"k\")]] kernel void j(device float* o [[buffer(0)]]) {}\n",
     "library.metal:2: two kernels are named 'k' (the other at line 1)"),
    ("buffer_index_range", "kernel void k(device float* o [[buffer(31)]]) {}\n",
     "library.metal:1: kernel 'k' parameter 'o': buffer index 31 is out of range (0..30)"),
    ("buffer_index_not_literal", "kernel void k(device float* o [[buffer(N)]]) {}\n",
     "library.metal:1: kernel 'k' parameter 'o': [[buffer(n)]] needs an integer literal"),
    ("buffer_by_value", "kernel void k(float v [[buffer(0)]]) {}\n",
     "library.metal:1: kernel 'k' parameter 'v': a [[buffer]] parameter must be a pointer or reference"),
    ("unbound_scalar", "\nkernel void k(float v) {}\n",
     "library.metal:2: kernel 'k' parameter 'v' has no [[buffer(n)]] or thread attribute and is not a pointer or reference"),
    ("texture", "kernel void k(texture2d<float> t [[texture(0)]]) {}\n",
     "library.metal:1: kernel 'k' parameter 't': [[texture]] is not supported by the CPU device"),
    ("attribute_type", "kernel void k(float i [[thread_position_in_grid]]) {}\n",
     "library.metal:1: parameter 'i' [[thread_position_in_grid]] has unsupported type 'float '"),
    ("attribute_width", "kernel void k(uint4 i [[thread_position_in_grid]]) {}\n",
     "library.metal:1: parameter 'i' [[thread_position_in_grid]] has unsupported type 'uint4 '"),
    ("max_threads_range", "[[max_total_threads_per_threadgroup(2048)]] kernel void k(device float* o) {}\n",
     "library.metal:1: max_total_threads_per_threadgroup must be in 1..1024"),
    ("max_threads_of_instantiation",
     "template <int N> kernel void t(device float* o [[buffer(0)]]) {}\n"
     "template [[host_name(\"t4\"), max_total_threads_per_threadgroup(N)]] kernel void t<4>(device float*);\n",
     "library.metal:2: max_total_threads_per_threadgroup of a kernel instantiation needs an integer literal"),
    ("deduced_arity",
     "template <typename T> kernel void t(device T* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {}\n"
     "template [[host_name(\"t\")]] kernel void t(device float* o);\n",
     "library.metal:2: the instantiation of kernel template 't' has 1 parameters, the template 2"),
    ("preprocessor_error_passes_through", "\n\n#elif 1\n", "library.metal:3: #elif without #if"),
    ("lexer_error_passes_through", "kernel void k() {}\n/* open\n", "library.metal:2: unterminated comment"),
]

# One lexer pass: each rewriting stage (preprocess, overloads, constants) hands the next the
# tokens of its output, moved and with only the replacements lexed (apply_edits); they must
# equal lexing that output again. Rows: dead branches before directives, macro expansions
# next to punctuation, multi-line invocations, blanked overloads, function constants.
SHARED_TOKENS = [
    "#if 0\nint a;\n#else\nint b;\n#endif\n#define X 1\nint c = X;\n  #if 1\nint d;\n  #endif\n",
    "#define K(n) kernel void n(device float* o [[buffer(0)]]) { o[0] = 1.5f; }\nK(a);\nK(b)\n"
    "int z = 1; K(c)int y;\n",
    "#define I(T) template [[host_name(#T)]] kernel void k<T>(device T*);\n"
    "template <typename T> kernel void k(device T* o [[buffer(0)]]) {}\nI(\n  float)\nI(int)/* c */I(half)\n",
    "struct C { float v; C() threadgroup {} C() {} float get() const device { return v; }\n"
    "  float get() const { return v; } };\nint after = 2>>1;\n",
    "constant bool f [[function_constant(0)]];\nconstant int n [[function_constant(1)]];\n"
    "kernel void k(device int* o [[buffer(0)]]) { if (is_function_constant_defined(f)) o[0] = n; }\n",
    "#if 0\nx\n#endif\n#define L a \\\n b\nint y; // tail\n#ifdef L\nint w;\n#endif\n",
]

# Barrier-region decisions: (id, kernel body, the execution note: "barrier regions" when the
# kernel gets the region form, else the start of the reason it stays on fibers or loops).
GROUP_HEAD = ("kernel void k(device float* out [[buffer(0)]], threadgroup float* t [[threadgroup(0)]],\n"
              "              uint l [[thread_position_in_threadgroup]], uint n [[threads_per_threadgroup]]) ")
REGIONS = [
    ("no_barrier", "{ out[l] = 1; }", "no barrier or SIMD-group call"),
    ("straight_barrier", "{ t[l] = out[l]; threadgroup_barrier(mem_flags::mem_threadgroup); out[l] = t[n - 1 - l]; }",
     "barrier regions"),
    ("uniform_loop",
     "{ t[l] = out[l]; for (uint s = n / 2; s > 0; s /= 2) { threadgroup_barrier(mem_flags::mem_threadgroup);"
     " if (l < s) t[l] += t[l + s]; } out[l] = t[0]; }", "barrier regions"),
    ("simd_sum", "{ out[l] = simd_sum(out[l]); }", "barrier regions"),
    ("goto", "{ threadgroup_barrier(mem_flags::mem_threadgroup); goto end; end: out[l] = 1; }", "line 2: goto"),
    ("barrier_under_per_thread_if",
     "{ if (l < 4) { threadgroup_barrier(mem_flags::mem_threadgroup); } out[l] = 1; }",
     "line 2: a barrier or 'threadgroup_barrier' under an if on per-thread values"),
    ("loop_on_per_thread_values",
     "{ for (uint s = l; s < n; ++s) { threadgroup_barrier(mem_flags::mem_threadgroup); } }",
     "line 2: a loop around a barrier whose condition depends on per-thread values"),
    ("lambda", "{ auto f = [&]() { out[l] = 1; }; threadgroup_barrier(mem_flags::mem_threadgroup); f(); }",
     "line 2: a lambda"),
    ("return_marks_done", "{ if (l >= n) return; threadgroup_barrier(mem_flags::mem_threadgroup); out[l] = 1; }",
     "barrier regions"),
    ("return_with_value", "{ threadgroup_barrier(mem_flags::mem_threadgroup); return 1; }",
     "line 2: a return with a value"),
    ("matrix_steps_under_per_thread_if",
     "{ simdgroup_float8x8 m; simdgroup_load(m, out, 8); threadgroup_barrier(mem_flags::mem_threadgroup);"
     " if (l < n) { simdgroup_multiply(m, m, m); simdgroup_store(m, out, 8); } }", "barrier regions"),
    ("simdgroup_barrier_under_per_thread_if",
     "{ if (l < 4) { simdgroup_barrier(mem_flags::mem_none); } out[l] = 1; }",
     "line 2: a barrier or 'simdgroup_barrier' under an if on per-thread values"),
]


# The wrapper each kernel gets: one alias of etm_cpu_kernel::kernel_wrapper (kernel_support/
# etm_cpu_kernel_wrapper.h) naming the kernel, its region form, its computed thread limit and
# each parameter's binding, and one line of entry points per kernel (and instantiation).
# (id, MSL, fragments of the translation, fragments that must not appear)
WRAPPERS = [
    ("bindings",
     "kernel void k(device float* out [[buffer(0)]], constant uint& n [[buffer(2)]],\n"
     "              threadgroup float* t [[threadgroup(1)]], ushort2 l [[thread_position_in_threadgroup]]) {}\n",
     ["using etm__kernel_k = etm_cpu_kernel::kernel_wrapper<static_cast<void (*)(device float * , const uint & , "
      "threadgroup float * , ushort2 )>(&k), nullptr, etm_cpu_kernel::no_max_threads, etm_cpu_kernel::buffer<0>, "
      "etm_cpu_kernel::buffer<2>, etm_cpu_kernel::threadgroup_memory<1>, "
      "etm_cpu_kernel::thread_position_in_threadgroup>;",
      '#if ETM_CPU_KERNEL_SELECTED(0)\n#line 1\n'
      'ETM_CPU_KERNEL_ENTRY_POINTS(0, "no barrier or SIMD-group call", etm__kernel_k)\n#endif'],
     ["ETM_CPU_KERNEL_REGIONS_ENTRY", "struct etm__kernel_k"]),
    ("template_with_regions",
     "using namespace metal;\n"
     "template <typename T, int N>\n"
     "[[kernel, max_total_threads_per_threadgroup(N * 32)]] void r(device T* out [[buffer(0)]],\n"
     "    uint l [[thread_index_in_threadgroup]], uint3 g [[threadgroup_position_in_grid]]) {\n"
     "  threadgroup T t[64]; t[l] = out[l]; threadgroup_barrier(mem_flags::mem_threadgroup); out[l] = t[0] + g.x; }\n"
     "template [[host_name(\"r_f4\")]] kernel void r<float, 4>(device float*, uint, uint3);\n",
     ["template <typename T, int N> using etm__kernel_r = etm_cpu_kernel::kernel_wrapper<static_cast<void (*)("
      "device T * , uint , uint3 )>(&r<T, N>), ETM_CPU_REGIONS(&etm__regions_r<T, N>), "
      "etm_cpu_kernel::max_threads<(N * 32)>, etm_cpu_kernel::buffer<0>, "
      "etm_cpu_kernel::thread_index_in_threadgroup, etm_cpu_kernel::threadgroup_position_in_grid>;",
      "template <typename T, int N> etm__kernel_r<T, N> etm__deduce_r(device T * , uint , uint3 );",
      '#line 6\nETM_CPU_KERNEL_ENTRY_POINTS(0, "barrier regions", etm__kernel_r<float, 4>)\n'
      "ETM_CPU_KERNEL_REGIONS_ENTRY(0, etm__kernel_r<float, 4>)\n#endif",
      # In the region form a thread attribute's value comes from the same tag type.
      "etm_cpu_kernel::attribute_value<uint , etm_cpu_kernel::thread_index_in_threadgroup>(etm__launch, "
      "etm__group, {etm__x, etm__y, etm__z, etm__index})",
      "etm_cpu_kernel::attribute_value<uint3 , etm_cpu_kernel::threadgroup_position_in_grid>(etm__launch, "
      "etm__group, {})"],
     []),
    # A value read past a barrier lives in the thread's frame; one read only in the region that
    # declares it is a local there (no frame member), and an if without else gets one mask.
    ("region_locals",
     "kernel void v(device float* out [[buffer(0)]], uint l [[thread_index_in_threadgroup]]) {\n"
     "  float kept = out[l]; const float s = simd_sum(kept); if (s > 0) out[l] = s;\n"
     "  threadgroup_barrier(mem_flags::mem_threadgroup); if (l < 4) { out[l] = simd_max(kept); } }\n",
     ["struct etm__frame { etm__t0 m0_kept; };", "etm__t1 s", "bool* etm__m1 = "],
     ["m1_s", "etm__m1_else"]),
    ("deduced_instantiation",
     "template <typename T>\n"
     "kernel void c(device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = 0; }\n"
     "template [[host_name(\"c_h\")]] kernel void c(device half* out, uint i);\n",
     ['ETM_CPU_KERNEL_ENTRY_POINTS(0, "no barrier or SIMD-group call", '
      "decltype(etm__deduce_c(std::declval<device half * >(), std::declval<uint >())))"],
     []),
]


def cases():
    """(id, stage, MSL, expected) for every table."""
    out = []
    for n, (msl, tokens) in enumerate(LEX):
        out.append((f"lex_{n}", "lex", msl, ("tokens", [list(t) for t in tokens])))
    for n, (msl, error) in enumerate(LEX_ERRORS):
        out.append((f"lex_error_{n}", "lex", msl, ("error", error)))
    for n, row in enumerate(PREPROCESS):
        out.append((f"preprocess_{n}", "preprocess", row[0], ("lines", row[1:])))
    for n, row in enumerate(PREPROCESS_EXPANSION):
        out.append((f"expansion_{n}", "preprocess", row[0], ("expansion", row[1:])))
    for n, (msl, error) in enumerate(PREPROCESS_ERRORS):
        out.append((f"preprocess_error_{n}", "preprocess", msl, ("error", error)))
    for n, row in enumerate(OVERLOADS):
        out.append((f"overloads_{n}", "overloads", row[0], ("fragments", row[1:])))
    for n, row in enumerate(CONDITIONALS):
        out.append((f"conditionals_{n}", "conditionals", row[0], ("fragments", row[1:])))
    for n, (msl, constants, fragments) in enumerate(CONSTANTS):
        out.append((f"constants_{n}", "constants", msl, ("constants", (constants, fragments))))
    for n, (msl, error) in enumerate(CONSTANT_ERRORS):
        out.append((f"constant_error_{n}", "constants", msl, ("error", error)))
    for name, msl, kernels in TRANSLATE:
        out.append((f"translate_{name}", "translate", msl, ("kernels", kernels)))
    for name, msl, error in TRANSLATE_ERRORS:
        out.append((f"translate_error_{name}", "translate", msl, ("error", error)))
    for n, msl in enumerate(SHARED_TOKENS):
        out.append((f"shared_tokens_{n}", "shared_tokens", msl, ("same", [True, True, True])))
    for name, msl, present, absent in WRAPPERS:
        out.append((f"wrapper_{name}", "translate", msl, ("source", (present, absent))))
    for name, body, note in REGIONS:
        out.append((f"regions_{name}", "translate", GROUP_HEAD + body + "\n", ("note", note)))
    return out


CASES = cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case's result, from one run of the driver."""
    objects = [path for path in library_objects("device_cpu_*.o", "*_device_cpu_*.o", "device_settings.cpp.o")
               if path.name != "device_cpu_cpu_device.cpp.o"]
    driver = build_host_program(Path(__file__).with_name("translator_stages_driver.cpp"), objects,
                                tmp_path_factory.mktemp("stages") / "translator_stages_driver", optimize="-O0")
    stdin = "".join(f"@@case {stage}\n{msl}" + ("" if msl.endswith("\n") else "\n")
                    for _, stage, msl, _ in CASES)
    run = subprocess.run([str(driver)], input=stdin, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == len(CASES), run.stdout[-2000:]
    return {case[0]: json.loads(line) for case, line in zip(CASES, lines)}


def execution_notes(source):
    """Entry index -> the execution note the translation exports with each kernel."""
    notes = {}
    for match in re.finditer(r'ETM_CPU_KERNEL_ENTRY_POINTS\((\d+), "((?:[^"\\]|\\.)*)"', source):
        notes[int(match.group(1))] = match.group(2).replace('\\"', '"').replace("\\\\", "\\")
    return notes


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_stage(results, case):
    name, stage, msl, (what, expected) = case
    result = results[name]
    if what == "error":
        assert result == {"error": expected}
        return
    assert "error" not in result, result["error"]
    if what == "tokens":
        assert result["tokens"] == expected
    elif what == "lines":
        stays, goes = expected
        text = result["text"]
        # Line numbers never move.
        assert text.count("\n") == msl.count("\n"), text
        lines = [line.strip() for line in text.splitlines()]
        for line in stays:
            assert line in lines, text
        for line in goes:
            assert line not in lines, text
    elif what == "expansion":
        line, fragments = expected
        text = result["text"]
        assert text.count("\n") == msl.count("\n"), text
        for fragment in fragments:
            assert fragment in text.splitlines()[line - 1], text
    elif what == "fragments":
        stays, goes = expected
        text = result["text"]
        assert text.count("\n") == msl.count("\n"), text
        for fragment in stays:
            assert fragment in text, text
        for fragment in goes:
            assert fragment not in text, text
    elif what == "constants":
        constants, fragments = expected
        assert result["constants"] == constants
        for fragment in fragments:
            assert fragment in result["text"], result["text"]
    elif what == "kernels":
        found = [(k["name"], k["line"], k["max_threads"], k["arguments"]) for k in result["kernels"]]
        assert found == [tuple(k) for k in expected]
        assert [k["entry"] for k in result["kernels"]] == list(range(len(expected)))
    elif what == "same":
        assert result["same"] == expected
    elif what == "source":
        present, absent = expected
        for fragment in present:
            assert fragment in result["source"], result["source"]
        for fragment in absent:
            assert fragment not in result["source"], result["source"]
    elif what == "note":
        notes = execution_notes(result["source"])
        assert [k["name"] for k in result["kernels"]] == ["k"]
        assert notes[0].startswith(expected), notes[0]
    else:
        raise AssertionError(what)
