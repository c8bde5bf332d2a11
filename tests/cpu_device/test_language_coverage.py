"""MSL constructs that real kernel corpora (MLX's kernels) use, as minimal snippets."""

import textwrap

import numpy as np
import pytest

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


def test_member_functions_qualified_by_address_space():
    # MLX's complex_t: constructors and conversions overloaded on the address space of
    # `*this`; on the CPU device they are one function (the unqualified/thread one stays).
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        struct pair_t {
          float a;
          float b;
          constexpr pair_t() thread : a(1), b(2) {}
          constexpr pair_t() threadgroup : a(-1), b(-2) {}
          constexpr pair_t(float x) device : a(x + 100), b(0) {}
          constexpr pair_t(float x) constant : a(x + 200), b(0) {}
          float sum() const device { return a + b + 1000; }
          float sum() const { return a + b; }
          operator float() const constant { return a * b; }
        };
        kernel void use_pairs(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          pair_t p;
          pair_t q{float(i)};
          out[i] = p.sum() * 10 + q.sum() + float(pair_t(3.0f));
        }
        """)
    with compile_library(source) as library:
        out = np.zeros(4, dtype=np.float32)
        library.function("use_pairs")(out, threads=4)
    # p = (1, 2): sum 3; q = (i + 100, 0): the first declared of the qualified ones; (103, 0) -> 0.
    assert np.array_equal(out, 30 + (np.arange(4, dtype=np.float32) + 100))


def test_max_total_threads_per_threadgroup_from_template_parameters():
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <typename T, int WM, int WN>
        [[kernel, max_total_threads_per_threadgroup(WM * WN * 32)]] void fill(
            device T* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = T(WM * 10 + WN);
        }
        template [[host_name("fill_2_1")]] [[kernel]] decltype(fill<float, 2, 1>) fill<float, 2, 1>;
        template [[host_name("fill_4_2")]] [[kernel]] decltype(fill<float, 4, 2>) fill<float, 4, 2>;
        """)
    import etmetal_py
    with compile_library(source) as library:
        out = np.zeros(256, dtype=np.float32)
        library.function("fill_4_2")(out, threads=256, group=256)
        assert np.all(out == 42)
        small = library.function("fill_2_1")
        small(out, threads=64, group=64)
        assert np.all(out[:64] == 21)
        with pytest.raises(etmetal_py.EtmetalError, match="maximum of 64"):
            small(out, threads=128, group=128)
        with pytest.raises(etmetal_py.EtmetalError, match="maximum of 64"):
            etmetal_py.synchronize()  # the stream's sticky error, reported once more and cleared


def test_max_total_threads_expression_out_of_range_is_a_compile_error():
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <int N>
        [[kernel, max_total_threads_per_threadgroup(N * 32)]] void wide(device int* out [[buffer(0)]]) {
          out[0] = N;
        }
        template [[host_name("wide_64")]] [[kernel]] decltype(wide<64>) wide<64>;
        """)
    import etmetal_py
    with pytest.raises(etmetal_py.EtmetalError, match="1..1024"):
        compile_library(source)
    with pytest.raises(etmetal_py.EtmetalError, match="1..1024"):
        etmetal_py.synchronize()  # the stream's sticky error, reported once more and cleared


def test_instantiation_with_deduced_template_arguments():
    # MLX's conv.metal: `template [[host_name(..)]] [[kernel]] void f(const device float* ...);`
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <int N> struct Params { int scale[N]; };
        template <typename T, int N>
        [[kernel]] void scaled(const device T* in [[buffer(0)]], device T* out [[buffer(1)]],
                               const constant Params<N>* params [[buffer(2)]],
                               uint i [[thread_position_in_grid]]) {
          out[i] = in[i] * T(params->scale[N - 1]);
        }
        #define instantiate_scaled(tname, T, n)                                              \\
          template [[host_name("scaled_" #tname "_" #n)]] [[kernel]] void scaled(             \\
              const device T* in [[buffer(0)]], device T* out [[buffer(1)]],                  \\
              const constant Params<n>* params [[buffer(2)]], uint i [[thread_position_in_grid]]);
        instantiate_scaled(float, float, 1)
        instantiate_scaled(int, int, 2)
        """)
    with compile_library(source) as library:
        values = np.arange(5, dtype=np.float32)
        out = np.zeros(5, dtype=np.float32)
        library.function("scaled_float_1")(values, out, np.array([3], dtype=np.int32), threads=5)
        assert np.array_equal(out, values * 3)
        integers = np.arange(5, dtype=np.int32)
        out_int = np.zeros(5, dtype=np.int32)
        library.function("scaled_int_2")(integers, out_int, np.array([3, 7], dtype=np.int32), threads=5)
        assert np.array_equal(out_int, integers * 7)


def test_function_constant_declared_through_a_macro():
    # MLX: `#define STEEL_CONST static constant constexpr const` then
    # `STEEL_CONST int n_ [[function_constant(2)]];`
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        #define MY_CONST static constant constexpr const
        MY_CONST int factor_ [[function_constant(2)]];
        MY_CONST bool negate_ [[function_constant(0)]];
        kernel void apply(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          int v = int(i) * factor_;
          out[i] = negate_ ? -v : v;
        }
        """)
    with compile_library(source) as library:
        out = np.zeros(4, dtype=np.int32)
        library.function("apply", constants={2: 5, 0: True})(out, threads=4)
    assert np.array_equal(out, -5 * np.arange(4, dtype=np.int32))


def test_metal_performance_primitives_are_declined_with_the_line():
    # MLX's *_nax kernels use Apple's tensor-operation framework (M5 GPUs).
    require_cpu_device()
    import etmetal_py
    source = "#include <metal_stdlib>\n\n#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
    with pytest.raises(etmetal_py.EtmetalError, match=r"library.metal:3: MetalPerformancePrimitives is not supported"):
        compile_library(source)
    with pytest.raises(etmetal_py.EtmetalError, match="MetalPerformancePrimitives"):
        etmetal_py.synchronize()


def test_free_functions_overloaded_on_parameter_address_space():
    # MLX's complex.h: `operator+=(thread complex_t<T>&, ...)` and the same for threadgroup
    # and device references; `constant` (const) overloads stay distinct.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        struct acc_t { int v; };
        thread acc_t& operator+=(thread acc_t& a, int b) { a.v += b; return a; }
        threadgroup acc_t& operator+=(threadgroup acc_t& a, int b) { a.v += 1000 * b; return a; }
        device acc_t& operator+=(device acc_t& a, int b) { a.v += 1000 * b; return a; }
        int read(const thread acc_t& a) { return a.v; }
        int read(constant acc_t& a) { return a.v; }
        int read(thread acc_t& a) { return -a.v; }
        kernel void accumulate(device acc_t* out [[buffer(0)]], constant acc_t& base [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
          out[i] += int(i);
          acc_t local{read(base)};
          local += 1;
          out[i].v += read(local);
        }
        """)
    with compile_library(source) as library:
        out = np.full(4, 10, dtype=np.int32)
        library.function("accumulate")(out, np.array([5], dtype=np.int32), threads=4)
    # out[i] = 10 + i; local = base (5, the const overload) + 1; read(local) is the non-const one: -6.
    assert np.array_equal(out, 10 + np.arange(4, dtype=np.int32) - 6)


def test_class_template_specializations_on_address_spaces_and_in_class_explicit_specializations():
    # MLX's type_traits.h: pointer_element<thread T*> / <device T*> / <threadgroup T*>;
    # binary_ops.h: `template <> complex64_t operator()(complex64_t, complex64_t)` in a struct.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <typename T> struct element_of {};
        template <typename T> struct element_of<thread T*> { using type = T; };
        template <typename T> struct element_of<device T*> { using type = T; };
        template <typename T> struct element_of<threadgroup T*> { using type = T; };
        template <typename T> struct element_of<constant T*> { using type = T; };
        struct Twice {
          template <typename T> T operator()(T x) { return x * 2; }
          template <> int operator()(int x) { return x * 3; }
        };
        kernel void apply(device float* f [[buffer(0)]], device int* n [[buffer(1)]],
                          constant float* c [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          typename element_of<decltype(f)>::type x = f[i];
          typename element_of<decltype(c)>::type y = c[0];
          f[i] = Twice()(x) + y;
          n[i] = Twice()(n[i]);
        }
        """)
    with compile_library(source) as library:
        f = np.arange(4, dtype=np.float32)
        n = np.arange(4, dtype=np.int32)
        library.function("apply")(f, n, np.array([0.5], dtype=np.float32), threads=4)
    assert np.array_equal(f, np.arange(4, dtype=np.float32) * 2 + 0.5)
    assert np.array_equal(n, np.arange(4, dtype=np.int32) * 3)


def test_default_template_argument_with_commas_bool_min_max_and_bfloat_from_a_class():
    # MLX: `typename Epilogue = TransformNone<OutT, AccT>` (the comma inside the default is
    # no parameter separator), metal::max of bool (binary.metal's Maximum), and a mask
    # struct with `operator bool()` assigned to a bfloat (steel_gemm_masked.metal).
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <typename Out, typename In> struct Cast { static Out apply(In x) { return Out(x); } };
        struct Always { char x; constexpr operator bool() const { return true; } };
        struct Doubled { float v; template <typename U> operator U() const { return U(v * 2); } };
        template <typename In, typename Out, typename Epilogue = Cast<Out, In>>
        [[kernel]] void convert(const device In* in [[buffer(0)]], device Out* out [[buffer(1)]],
                                device bfloat* flags [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          out[i] = Epilogue::apply(in[i]);
          const Always always{};
          bfloat flag = always;
          bfloat own = Doubled{1.5f};  // its own conversion, not through float
          flags[i] = flag + own + bfloat(metal::max(i % 2 == 0, false)) + bfloat(metal::min(true, i == 1));
        }
        template [[host_name("convert_int_float")]] [[kernel]] decltype(convert<int, float>) convert<int, float>;
        """)
    with compile_library(source) as library:
        values = np.arange(4, dtype=np.int32)
        out = np.zeros(4, dtype=np.float32)
        flags = np.zeros(4, dtype=np.uint16)  # bfloat bits
        library.function("convert_int_float")(values, out, flags, threads=4)
    assert np.array_equal(out, values.astype(np.float32))
    as_float = (flags.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(as_float, np.float32([5, 5, 5, 4]))


def test_kernel_template_declared_without_attributes_before_its_definition():
    # torch's c10/metal/indexing.h: kernel templates are declared (parameters without
    # attributes) before the macros that instantiate them; the definition has the attributes.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        namespace ops {
        template <typename T>
        kernel void shifted(device T* out, constant T* in, constant uint& shift, uint index);

        template <typename T>
        kernel void shifted(device T* out [[buffer(0)]], constant T* in [[buffer(1)]],
                            constant uint& shift [[buffer(2)]], uint index [[thread_position_in_grid]]) {
          out[index] = in[index + shift];
        }
        }  // namespace ops
        template [[host_name("shifted_float")]] kernel void ops::shifted<float>(
            device float* out, constant float* in, constant uint& shift, uint index);
        """)
    with compile_library(source) as library:
        values = np.arange(8, dtype=np.float32)
        out = np.zeros(6, dtype=np.float32)
        library.function("shifted_float")(out, values, np.array([2], dtype=np.uint32), threads=6)
        assert np.array_equal(out, values[2:])


def test_aten_instantiation_spellings_enum_class_parameters_and_array_references():
    # PyTorch's MPS kernels: `template[[host_name(...)]]` with no space, a kernel template whose
    # default non-type argument names an earlier one (`int V = D`), helpers partially
    # specialised on an enum class value, and `thread T (&)[N]` array-reference parameters.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        enum class Mode { SUM = 0, MAX };
        template <Mode M, typename T> struct Combine {
          static T apply(T a, T b) { return a + b; }
        };
        template <typename T> struct Combine<Mode::MAX, T> {
          static T apply(T a, T b) { return max(a, b); }
        };
        template <Mode M, typename T, short N>
        inline T fold(thread T (&values)[N]) {
          T acc = values[0];
          for (short i = 1; i < N; ++i) acc = Combine<M, T>::apply(acc, values[i]);
          return acc;
        }
        template <typename T, int D, int V = D>
        [[kernel]] void reduce_rows(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                                    uint row [[thread_position_in_grid]]) {
          thread T values[D];
          for (int i = 0; i < D; ++i) values[i] = in[row * D + i];
          out[row] = fold<Mode::SUM, T, D>(values) + T(V - D) + fold<Mode::MAX, T, D>(values);
        }
        #define INSTANTIATE(T, D) \\
          template[[host_name("reduce_rows_" #T "_" #D)]] [[kernel]] void reduce_rows<T, D>( \\
              device const T*, device T*, uint);
        INSTANTIATE(float, 4)
        """)
    with compile_library(source) as library:
        rows = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = np.zeros(3, dtype=np.float32)
        library.function("reduce_rows_float_4")(rows, out, threads=3)
        np.testing.assert_array_equal(out, rows.sum(axis=1) + rows.max(axis=1))


def test_bfloat_conditional_with_an_integer_operand_and_mixed_compound_assignment():
    # PyTorch's HistogramKernel: `weight_stride >= 0 ? weight[i] : 1` with bfloat weights. Metal
    # converts the int to bfloat; with bfloat a class that also converted implicitly to int
    # (through float), C++ found conversions both ways and rejected the conditional.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        [[kernel]] void weigh(device const bfloat* weight [[buffer(0)]], device float* out [[buffer(1)]],
                              device int* whole [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          const bfloat w = i % 2 == 0 ? weight[i] : 1;
          const auto other = i % 2 == 0 ? 0 : weight[i];
          float sum = 0.5f;
          sum += w;
          sum *= other > 1 ? bfloat(2) : bfloat(1);
          int count = int(w);
          count += weight[i];
          out[i] = sum + (w <= 2 && !(other != other) ? 100.0f : 0.0f);
          whole[i] = count;
        }
        """)
    weights = np.float32([3.5, 2.25, -1.5, 0.5])
    bits = (weights.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat
    with compile_library(source) as library:
        out = np.zeros(4, dtype=np.float32)
        whole = np.zeros(4, dtype=np.int32)
        library.function("weigh")(bits, out, whole, threads=4)
    w = np.where(np.arange(4) % 2 == 0, weights, 1)
    other = np.where(np.arange(4) % 2 == 0, 0, weights)
    expected_sum = (0.5 + w) * np.where(other > 1, 2, 1) + np.where(w <= 2, 100, 0)
    np.testing.assert_array_equal(out, expected_sum.astype(np.float32))
    # int += bfloat computes int + bfloat in bfloat, then truncates: 3 + 3.5 -> 6, -1 - 1.5 -> -2.
    np.testing.assert_array_equal(whole, np.trunc(np.trunc(w) + weights).astype(np.int32))


def test_kernel_template_with_a_function_pointer_parameter_instantiated_with_closing_angles():
    # PyTorch's Indexing/ScatterGather: `template <typename T, T (*Reduce)(T, T)>` kernels,
    # instantiated as `fold<T, Op::amax<T>>` where the lexer's `>>` closes both lists.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        struct Op {
          template <typename T> static T amax(T a, T b) { return max(a, b); }
          template <typename T> static T prod(T a, T b) { return a * b; }
        };
        template <typename T, T (*Reduce)(T, T)>
        kernel void fold(device T* out [[buffer(0)]], constant T* in [[buffer(1)]],
                         uint i [[thread_position_in_grid]]) {
          out[i] = Reduce(out[i], in[i]);
        }
        #define INSTANTIATE(NAME, T) \\
          template [[host_name("fold_" #NAME "_" #T)]] kernel void fold<T, Op::NAME<T>>( \\
              device T*, constant T*, uint);
        INSTANTIATE(amax, float)
        INSTANTIATE(prod, int)
        """)
    with compile_library(source) as library:
        floats = np.float32([1, 5, -2, 7])
        out = np.float32([3, 3, 3, 3])
        library.function("fold_amax_float")(out, floats, threads=4)
        ints = np.int32([2, -3, 4, 0])
        products = np.int32([5, 5, 5, 5])
        library.function("fold_prod_int")(products, ints, threads=4)
    np.testing.assert_array_equal(out, np.maximum(np.float32(3), floats))
    np.testing.assert_array_equal(products, ints * 5)


def test_conditional_with_bfloat_and_float_operands_takes_the_usual_arithmetic_conversions():
    # PyTorch's UnaryKernel: `isnan(x) ? x : x < 0 ? M_PI_F : 0.0` with bfloat x. Metal's bfloat
    # is arithmetic: with a float operand the conditional is float, with an integer bfloat,
    # with bfloat on both sides it keeps the operands' lvalue-ness, and only the chosen arm
    # is evaluated.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <typename T> T angle(T x) { return T(isnan(x) ? x : x < 0 ? M_PI_F : 0.0); }
        #define FIRST_OF(A, B, C) (A)
        [[kernel]] void pick(device const bfloat* in [[buffer(0)]], device float* out [[buffer(1)]],
                             device int* counts [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          bfloat x = in[i];
          bfloat spare = bfloat(-7);
          static_assert(is_same_v<decltype(i > 1 ? x : 2.5f), float>, "bfloat : float is float");
          static_assert(is_same_v<decltype(i > 1 ? 3 : x), bfloat>, "int : bfloat is bfloat");
          static_assert(is_same_v<decltype(i > 1 ? x : spare), bfloat&>, "an lvalue stays one");
          // UnaryKernel's log1p of half2: precise:: functions are float-only in Metal, so a half
          // and a float argument convert to float (metal::atan2 would be ambiguous).
          const half h = half(in[i]);
          static_assert(is_same_v<decltype(::precise::atan2(h, 1.0 + h)), float>, "float only");
          static_assert(is_same_v<decltype(precise::exp(h)), float>, "float only");
          int taken = 0, skipped = 0;
          const float mixed = i % 2 == 0 ? (taken += 1, x) : (skipped += 1, 0.1f);
          (i == 0 ? x : spare) = bfloat(9);
          device const bfloat* none = i > 100 ? in : 0;
          out[4 * i + 0] = angle(x);
          out[4 * i + 1] = mixed;
          out[4 * i + 2] = float(x) + float(spare);
          out[4 * i + 3] = none == 0 ? float(angle(float(in[i]))) : -1.0f;
          counts[2 * i] = taken;
          counts[2 * i + 1] = skipped;
          out[16 + i] = ::precise::atan2(h, 1.0 + h);
          out[20 + i] = FIRST_OF(i > 1 ? x : 2.5f, <, >);  // ScanKernel's CUM_OP arguments
          threadgroup float scratch[(sizeof(bfloat) == 2) ? 4 : 1];  // Cdist's threadgroup array
          scratch[i % 4] = float(x) * 2;
          out[24 + i] = scratch[i % 4];
        }
        """)
    values = np.float32([1.5, -2.0, np.nan, -0.5])
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact in bfloat
    with compile_library(source) as library:
        out = np.zeros(28, dtype=np.float32)
        counts = np.zeros(8, dtype=np.int32)
        library.function("pick")(bits, out, counts, threads=4)
    np.testing.assert_array_equal(out[20:24], np.where(np.arange(4) > 1, values, np.float32(2.5)))
    np.testing.assert_array_equal(out[24:], np.where(np.arange(4) == 0, 18, values * 2))  # x became 9 on thread 0
    h = values.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(out[16:20], np.arctan2(h, 1 + h), rtol=1e-6)
    out = out[:16].reshape(4, 4)
    pi_bf = np.float32(3.140625)  # M_PI_F rounded to bfloat (T(...) of a float)
    angle = np.where(np.isnan(values), values, np.where(values < 0, pi_bf, 0))
    np.testing.assert_array_equal(out[:, 0], angle.astype(np.float32))
    even = np.arange(4) % 2 == 0
    np.testing.assert_array_equal(out[:, 1], np.where(even, values, np.float32(0.1)))
    # Thread 0 assigned x, the others the spare.
    np.testing.assert_array_equal(out[:, 2], np.where(np.arange(4) == 0, 9 - 7, values + 9))
    np.testing.assert_array_equal(out[:, 3], np.where(values < 0, np.float32(np.pi), np.where(np.isnan(values), values, 0)))
    np.testing.assert_array_equal(counts.reshape(4, 2), np.stack([even, ~even], axis=1).astype(np.int32))


def test_matrix_types_columns_and_products():
    # PyTorch's Quantized kernels: float4x4 / float2x4 built column by column, row vector times
    # matrix. Metal's floatCxR has C columns of R rows; m[i] is a column.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        [[kernel]] void products(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                 uint i [[thread_position_in_grid]]) {
          float4x4 m;
          for (int c = 0; c < 4; ++c) m[c] = {in[4 * c], in[4 * c + 1], in[4 * c + 2], in[4 * c + 3]};
          const float4 v = float4(in[16], in[17], in[18], in[19]);
          float2x4 pair = float2x4(0.f);
          pair[1] = v;
          const float2x2 a(1, 2, 3, 4);
          const float2x2 b = float2x2(float2(5, 6), float2(7, 8));
          const float2x2 ab = a * b;
          const float4 row = v * m;
          const float4 column = m * v;
          const float4 scaled = (2.0f * m)[3] + (m - m)[0] + pair[0];
          const float4 via_pair = pair[1] * m;
          for (int k = 0; k < 4; ++k) {
            out[k] = row[k];
            out[4 + k] = column[k];
            out[8 + k] = scaled[k];
            out[12 + k] = via_pair[k];
          }
          out[16] = ab[0][0]; out[17] = ab[0][1]; out[18] = ab[1][0]; out[19] = ab[1][1];
          out[20] = transpose(pair)[2][1];
          out[21] = float4x4(2.0f)[1][1] + float4x4(2.0f)[1][2];
        }
        """)
    data = np.arange(1, 21, dtype=np.float32) / 4
    with compile_library(source) as library:
        out = np.zeros(22, dtype=np.float32)
        library.function("products")(data, out, threads=1)
    columns = data[:16].reshape(4, 4)  # row c of this array is column c of the matrix
    matrix = columns.T
    v = data[16:20]
    np.testing.assert_allclose(out[0:4], v @ matrix, rtol=1e-6)
    np.testing.assert_allclose(out[4:8], matrix @ v, rtol=1e-6)
    np.testing.assert_allclose(out[8:12], 2 * columns[3], rtol=1e-6)
    np.testing.assert_allclose(out[12:16], v @ matrix, rtol=1e-6)
    a = np.array([[1, 3], [2, 4]], np.float32)
    b = np.array([[5, 7], [6, 8]], np.float32)
    np.testing.assert_array_equal(out[16:20], (a @ b).T.ravel())
    assert out[20] == v[2] and out[21] == 2


def test_vector_types_of_different_elements_and_pointer_frexp_are_compile_errors_with_the_line():
    # Metal allows no implicit conversion between vector types (float2 * half2, as PyTorch's
    # c10::metal::mul(float2, half2) would need), and its frexp returns the exponent through a
    # reference: `frexp(x, &e)` is C's signature. Both fail at their MSL line.
    require_cpu_device()
    import etmetal_py
    mixed = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        [[kernel]] void mix(device float2* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          out[i] = out[i] * half2(1, 2);
        }
        """)
    with pytest.raises(etmetal_py.EtmetalError, match=r"library.metal:4:"):
        compile_library(mixed)
    pointer = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        [[kernel]] void split(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
          int e;
          out[i] = frexp(out[i], &e) + e;
        }
        """)
    with pytest.raises(etmetal_py.EtmetalError, match=r"library.metal:5:.*frexp"):
        compile_library(pointer)
    with pytest.raises(etmetal_py.EtmetalError):
        etmetal_py.synchronize()


def test_function_pointer_template_parameter_over_constant_and_filled_simdgroup_matrix_default_rows():
    # PyTorch's Quantized (after llama.cpp): `template <typename T, float2 (*F)(constant T*, uint2)>`
    # kernels instantiated with a function whose parameter is `constant T*` (both must read
    # `const T*`), and make_filled_simdgroup_matrix<float, 8>(0.f), whose Rows defaults to Cols.
    require_cpu_device()
    source = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        template <typename T> float2 scale_zero(constant T* table, uint2 index) {
          return float2(table[index.x], float(index.y));
        }
        template <typename T, float2 (*Get)(constant T*, uint2)>
        kernel void dequantize(constant T* table [[buffer(0)]], device float* out [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
          simdgroup_float8x8 filled = make_filled_simdgroup_matrix<float, 8>(0.5f);
          out[i] = Get(table, uint2(i, 3)).x * 2 + Get(table, uint2(i, 3)).y + filled.thread_elements()[0];
        }
        template [[host_name("dequantize_half")]] kernel void dequantize<half, scale_zero<half>>(
            constant half*, device float*, uint);
        """)
    table = np.float16([1.5, -2, 0.25, 8] * 8)
    with compile_library(source) as library:
        out = np.zeros(32, dtype=np.float32)
        library.function("dequantize_half")(table, out, threads=32)
    np.testing.assert_array_equal(out, table.astype(np.float32) * 2 + 3 + 0.5)
