// metal_math, metal_common, metal_geometric and metal_relational for float and half scalars and
// for float, half and bfloat vectors.
//
// Every function is declared directly in namespace metal, with Apple's overload set: one
// overload per floating scalar type plus one template for vectors and swizzles. metal::fast
// and metal::precise name the same functions through using-declarations. Declaring them
// directly matters: if `metal` only pulled them in through a using-directive, a qualified call
// metal::exp(x) would stop at any metal::exp overload user code adds (say for bfloat) and
// silently convert float arguments to it.
//
// Implementations use compiler builtins (which call the host libm), never <cmath>, except the
// exp family, which is written out so that loops calling it vectorise. half and bfloat are
// computed in float and rounded once, so they are at least as accurate as Metal's.
#pragma once

#include "etm_functions.h"

namespace etm_msl {

constexpr float quiet_nan = __builtin_nanf("");
// Long double literal: kernels are compiled with -fsingle-precision-constant, which would turn
// an unsuffixed double literal into a float.
constexpr double pi_double = double(3.14159265358979323846264338327950288L);

// sin/cos/tan of pi*x with the argument reduced exactly first, so that integers and halves
// give exact zeros and ones instead of sin(pi * 1.0f) ~ -8.7e-8.
inline float sinpi(float x) {
  if (!__builtin_isfinite(x)) return quiet_nan;
  const float reduced = __builtin_fmodf(x, 2.0f);  // exact, in (-2, 2)
  if (reduced == __builtin_truncf(reduced)) return __builtin_copysignf(0.0f, x);
  return float(__builtin_sin(pi_double * double(reduced)));
}
inline float cospi(float x) {
  if (!__builtin_isfinite(x)) return quiet_nan;
  const float reduced = __builtin_fabsf(__builtin_fmodf(x, 2.0f));  // exact, in [0, 2)
  if (reduced == 0.5f || reduced == 1.5f) return 0.0f;
  return float(__builtin_cos(pi_double * double(reduced)));
}
inline float tanpi(float x) {
  if (!__builtin_isfinite(x)) return quiet_nan;
  const float reduced = __builtin_fmodf(x, 1.0f);  // tan has period pi
  if (reduced == 0.0f) return __builtin_copysignf(0.0f, x);
  if (__builtin_fabsf(reduced) == 0.5f) return __builtin_copysignf(__builtin_inff(), reduced);
  return float(__builtin_tan(pi_double * double(reduced)));
}
// x with its magnitude limited to 192, NaN kept: past 192, exp, exp2 and exp10 of float are
// inf or 0 either way. Selected on the bits, an integer select: g++ if-converts it in loops
// over threads, where a float comparison's select may become a branch (it could raise an FP
// exception g++ must not speculate under -ftrapping-math).
inline float exponent_argument(float x) {
  const int bits = __builtin_bit_cast(int, x);
  const int magnitude = bits & 0x7fffffff;
  const bool beyond = magnitude > 0x43400000 && magnitude <= 0x7f800000;  // 192 < |x| <= inf
  return __builtin_bit_cast(float, beyond ? (bits & int(0x80000000u)) | 0x43400000 : bits);
}
// 2^z rounded once to float, for |z| <= 192 log2(10) or NaN: the core of exp, exp2 and exp10.
// Branch-free and call-free, unlike libm's expf, so that g++ vectorises the loops over a
// group's threads that call it (SiLU, sigmoid, softmax). z = n + f with n the nearest integer
// (|f| <= 1/2): 2^f by its Taylor polynomial in f ln 2 (degree 8: 2e-10 relative), 2^n put
// in a double's exponent bits. Within 0.51 ulp of 2^z for every float result, subnormals
// included (tests/metal_stdlib/test_exp.py).
__attribute__((always_inline)) inline float exp2_to_float(double z) {
  constexpr double ln_2 = double(0x1.62e42fefa39efp-1L);
  // Adding 1.5 * 2^52 rounds a double of magnitude below 2^51 to an integer held in the low
  // mantissa bits.
  constexpr double round_shift = double(0x1.8p52L);
  const double shifted = z + round_shift;
  const double u = (z - (shifted - round_shift)) * ln_2;
  // Estrin's scheme: pairs of terms side by side, half the dependent operations of Horner's
  // (the scalar code where a loop does not vectorise is latency-bound).
  const double u2 = u * u;
  const double u4 = u2 * u2;
  const double terms_0_1 = double(1.0L) + u;
  const double terms_2_3 = double(0.5L) + u * double(1.0L / 6);
  const double terms_4_5 = double(1.0L / 24) + u * double(1.0L / 120);
  const double terms_6_7 = double(1.0L / 720) + u * double(1.0L / 5040);
  const double terms_0_3 = terms_0_1 + u2 * terms_2_3;
  const double terms_4_8 = terms_4_5 + u2 * (terms_6_7 + u2 * double(1.0L / 40320));
  const double p = terms_0_3 + u4 * terms_4_8;
  // The low 12 bits of `shifted` hold n modulo 4096; moved up into the exponent field, with
  // the bias added, they are 2^n (normal: |n| <= 638).
  const unsigned long long power_bits = (__builtin_bit_cast(unsigned long long, shifted) + 1023) << 52;
  return float(p * __builtin_bit_cast(double, power_bits));
}
inline float exp(float x) { return exp2_to_float(double(exponent_argument(x)) * double(0x1.71547652b82fep0L)); }
inline float exp2(float x) { return exp2_to_float(double(exponent_argument(x))); }
inline float exp10(float x) { return exp2_to_float(double(exponent_argument(x)) * double(0x1.a934f0979a371p1L)); }
inline float fract(float x) { return __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f); }
inline float sign(float x) {
  if (x > 0.0f) return 1.0f;
  if (x < 0.0f) return -1.0f;
  return x == x ? x : 0.0f;  // keeps the sign of a zero; NaN gives 0
}
// Metal's fmax and fmin: y if x < y (y < x), else x; a NaN argument gives the other one.
// Selects g++ vectorises in loops over threads, unlike libm's fmaxf / fminf.
inline float maximum(float x, float y) { return x < y || x != x ? y : x; }
inline float minimum(float x, float y) { return y < x || x != x ? y : x; }
inline float saturate(float x) { return __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f); }
inline float powr(float x, float y) { return x < 0.0f ? quiet_nan : __builtin_powf(x, y); }
inline float median3(float x, float y, float z) {
  return __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z));
}
inline float smoothstep(float edge0, float edge1, float x) {
  const float t = saturate((x - edge0) / (edge1 - edge0));
  return t * t * (3.0f - 2.0f * t);
}

}  // namespace etm_msl

// Scalar overloads for float and half, plus the vector template, of a function whose float
// version is `float_expression` over parameters named x, y, z. Like Apple's library, there are
// no bfloat scalar overloads: a bfloat argument converts to float and the result is float.
// (MLX defines metal::exp(bfloat) and friends itself; ours would be redefinitions.)
#define ETM_FLOAT_FUNCTION_1(name, float_expression)                                          \
  inline float name(float x) { return float_expression; }                                     \
  inline half name(half x) { return half(name(float(x))); }                                   \
  template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>          \
  inline etm_msl::plain_vector_t<V> name(const V& x) {                                        \
    return etm_msl::map_components([](auto c) { return decltype(c)(name(c)); }, x);           \
  }
#define ETM_FLOAT_FUNCTION_2(name, float_expression)                                          \
  inline float name(float x, float y) { return float_expression; }                           \
  inline half name(half x, half y) { return half(name(float(x), float(y))); }                 \
  template <class A, class B,                                                                 \
            std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B>, int> = 0>           \
  inline etm_msl::common_vector_t<A, B> name(const A& x, const B& y) {                        \
    return etm_msl::map_components([](auto a, auto b) { return decltype(a)(name(a, b)); }, x, y); \
  }
#define ETM_FLOAT_FUNCTION_3(name, float_expression)                                          \
  inline float name(float x, float y, float z) { return float_expression; }                   \
  inline half name(half x, half y, half z) { return half(name(float(x), float(y), float(z))); } \
  template <class A, class B, class C,                                                        \
            std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B, C>, int> = 0>        \
  inline etm_msl::common_vector_t<A, B, C> name(const A& x, const B& y, const C& z) {         \
    return etm_msl::map_components([](auto a, auto b, auto c) { return decltype(a)(name(a, b, c)); }, x, y, z); \
  }
// Predicates: bool for scalars, a bool vector for vectors.
#define ETM_FLOAT_PREDICATE_1(name, float_expression)                                         \
  inline bool name(float x) { return float_expression; }                                      \
  inline bool name(half x) { return name(float(x)); }                                         \
  inline bool name(bfloat x) { return name(float(x)); }                                       \
  template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>          \
  inline etm_vec::vector<bool, etm_msl::components_v<V>, false> name(const V& x) {            \
    return etm_msl::map_components([](auto c) { return name(c); }, x);                        \
  }
#define ETM_FLOAT_PREDICATE_2(name, float_expression)                                         \
  inline bool name(float x, float y) { return float_expression; }                             \
  inline bool name(half x, half y) { return name(float(x), float(y)); }                       \
  inline bool name(bfloat x, bfloat y) { return name(float(x), float(y)); }                   \
  template <class A, class B,                                                                 \
            std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B>, int> = 0>           \
  inline etm_vec::vector<bool, etm_msl::components_v<etm_msl::common_vector_t<A, B>>, false> name( \
      const A& x, const B& y) {                                                               \
    return etm_msl::map_components([](auto a, auto b) { return name(a, b); }, x, y);          \
  }

namespace metal {

ETM_FLOAT_FUNCTION_1(acos, __builtin_acosf(x))
ETM_FLOAT_FUNCTION_1(acosh, __builtin_acoshf(x))
ETM_FLOAT_FUNCTION_1(asin, __builtin_asinf(x))
ETM_FLOAT_FUNCTION_1(asinh, __builtin_asinhf(x))
ETM_FLOAT_FUNCTION_1(atan, __builtin_atanf(x))
ETM_FLOAT_FUNCTION_1(atanh, __builtin_atanhf(x))
ETM_FLOAT_FUNCTION_1(ceil, __builtin_ceilf(x))
ETM_FLOAT_FUNCTION_1(cos, __builtin_cosf(x))
ETM_FLOAT_FUNCTION_1(cosh, __builtin_coshf(x))
ETM_FLOAT_FUNCTION_1(cospi, etm_msl::cospi(x))
ETM_FLOAT_FUNCTION_1(exp, etm_msl::exp(x))
ETM_FLOAT_FUNCTION_1(exp2, etm_msl::exp2(x))
ETM_FLOAT_FUNCTION_1(exp10, etm_msl::exp10(x))
ETM_FLOAT_FUNCTION_1(fabs, __builtin_fabsf(x))
ETM_FLOAT_FUNCTION_1(abs, __builtin_fabsf(x))
ETM_FLOAT_FUNCTION_1(floor, __builtin_floorf(x))
ETM_FLOAT_FUNCTION_1(fract, etm_msl::fract(x))
ETM_FLOAT_FUNCTION_1(log, __builtin_logf(x))
ETM_FLOAT_FUNCTION_1(log2, __builtin_log2f(x))
ETM_FLOAT_FUNCTION_1(log10, __builtin_log10f(x))
ETM_FLOAT_FUNCTION_1(rint, __builtin_rintf(x))
ETM_FLOAT_FUNCTION_1(round, __builtin_roundf(x))
ETM_FLOAT_FUNCTION_1(rsqrt, 1.0f / __builtin_sqrtf(x))
ETM_FLOAT_FUNCTION_1(saturate, etm_msl::saturate(x))
ETM_FLOAT_FUNCTION_1(sign, etm_msl::sign(x))
ETM_FLOAT_FUNCTION_1(sin, __builtin_sinf(x))
ETM_FLOAT_FUNCTION_1(sinh, __builtin_sinhf(x))
ETM_FLOAT_FUNCTION_1(sinpi, etm_msl::sinpi(x))
ETM_FLOAT_FUNCTION_1(sqrt, __builtin_sqrtf(x))
ETM_FLOAT_FUNCTION_1(tan, __builtin_tanf(x))
ETM_FLOAT_FUNCTION_1(tanh, __builtin_tanhf(x))
ETM_FLOAT_FUNCTION_1(tanpi, etm_msl::tanpi(x))
ETM_FLOAT_FUNCTION_1(trunc, __builtin_truncf(x))

ETM_FLOAT_FUNCTION_2(atan2, __builtin_atan2f(x, y))
ETM_FLOAT_FUNCTION_2(copysign, __builtin_copysignf(x, y))
ETM_FLOAT_FUNCTION_2(divide, x / y)
ETM_FLOAT_FUNCTION_2(fdim, __builtin_fdimf(x, y))
ETM_FLOAT_FUNCTION_2(fmax, etm_msl::maximum(x, y))
ETM_FLOAT_FUNCTION_2(fmin, etm_msl::minimum(x, y))
ETM_FLOAT_FUNCTION_2(max, etm_msl::maximum(x, y))
ETM_FLOAT_FUNCTION_2(min, etm_msl::minimum(x, y))
ETM_FLOAT_FUNCTION_2(fmod, __builtin_fmodf(x, y))
ETM_FLOAT_FUNCTION_2(nextafter, __builtin_nextafterf(x, y))
ETM_FLOAT_FUNCTION_2(pow, __builtin_powf(x, y))
ETM_FLOAT_FUNCTION_2(powr, etm_msl::powr(x, y))
ETM_FLOAT_FUNCTION_2(step, y < x ? 0.0f : 1.0f)

ETM_FLOAT_FUNCTION_3(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z))
ETM_FLOAT_FUNCTION_3(fma, __builtin_fmaf(x, y, z))
ETM_FLOAT_FUNCTION_3(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
ETM_FLOAT_FUNCTION_3(fmin3, __builtin_fminf(__builtin_fminf(x, y), z))
ETM_FLOAT_FUNCTION_3(fmedian3, etm_msl::median3(x, y, z))
ETM_FLOAT_FUNCTION_3(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
ETM_FLOAT_FUNCTION_3(min3, __builtin_fminf(__builtin_fminf(x, y), z))
ETM_FLOAT_FUNCTION_3(median3, etm_msl::median3(x, y, z))
ETM_FLOAT_FUNCTION_3(mix, x + (y - x) * z)
ETM_FLOAT_FUNCTION_3(smoothstep, etm_msl::smoothstep(x, y, z))

ETM_FLOAT_PREDICATE_1(isfinite, __builtin_isfinite(x))
ETM_FLOAT_PREDICATE_1(isinf, __builtin_isinf(x))
ETM_FLOAT_PREDICATE_1(isnan, __builtin_isnan(x))
ETM_FLOAT_PREDICATE_1(isnormal, __builtin_isnormal(x))
ETM_FLOAT_PREDICATE_1(signbit, __builtin_signbit(x) != 0)
ETM_FLOAT_PREDICATE_2(isordered, !__builtin_isunordered(x, y))
ETM_FLOAT_PREDICATE_2(isunordered, __builtin_isunordered(x, y))

// Functions with integer or reference parameters.
inline float ldexp(float x, int k) { return __builtin_ldexpf(x, k); }
inline half ldexp(half x, int k) { return half(__builtin_ldexpf(float(x), k)); }
template <class V, class K,
          std::enable_if_t<etm_msl::is_float_vector_like_v<V> &&
                               (std::is_integral<K>::value ||
                                (etm_msl::is_vector_like_v<K> && etm_msl::components_v<K> == etm_msl::components_v<V>)),
                           int> = 0>
inline etm_msl::plain_vector_t<V> ldexp(const V& x, const K& k) {
  etm_msl::plain_vector_t<V> result(etm_msl::zero_tag{});
  for (int i = 0; i < etm_msl::components_v<V>; ++i)
    result[i] = etm_msl::element_t<V>(ldexp(x[i], int(etm_msl::component(k, i))));
  return result;
}

inline int ilogb(float x) { return __builtin_ilogbf(x); }
inline int ilogb(half x) { return __builtin_ilogbf(float(x)); }
inline int ilogb(bfloat x) { return __builtin_ilogbf(float(x)); }
template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>
inline etm_vec::vector<int, etm_msl::components_v<V>, false> ilogb(const V& x) {
  return etm_msl::map_components([](auto c) { return ilogb(c); }, x);
}

inline float frexp(float x, int& exponent) { return __builtin_frexpf(x, &exponent); }
inline half frexp(half x, int& exponent) { return half(__builtin_frexpf(float(x), &exponent)); }
template <class T, int N, bool P, bool Q, std::enable_if_t<etm_msl::is_float_scalar_v<T>, int> = 0>
inline etm_vec::vector<T, N, false> frexp(const etm_vec::vector<T, N, P>& x, etm_vec::vector<int, N, Q>& exponent) {
  etm_vec::vector<T, N, false> result(etm_msl::zero_tag{});
  for (int i = 0; i < N; ++i) result[i] = T(frexp(x[i], exponent[i]));
  return result;
}

inline float modf(float x, float& integral_part) { return __builtin_modff(x, &integral_part); }
inline half modf(half x, half& integral_part) {
  float whole = 0.0f;
  const float fraction = __builtin_modff(float(x), &whole);
  integral_part = half(whole);
  return half(fraction);
}
inline bfloat modf(bfloat x, bfloat& integral_part) {
  float whole = 0.0f;
  const float fraction = __builtin_modff(float(x), &whole);
  integral_part = bfloat(whole);
  return bfloat(fraction);
}
template <class T, int N, bool P, bool Q, std::enable_if_t<etm_msl::is_float_scalar_v<T>, int> = 0>
inline etm_vec::vector<T, N, false> modf(const etm_vec::vector<T, N, P>& x, etm_vec::vector<T, N, Q>& integral_part) {
  etm_vec::vector<T, N, false> result(etm_msl::zero_tag{});
  for (int i = 0; i < N; ++i) result[i] = modf(x[i], integral_part[i]);
  return result;
}

// sincos(x, cosval): returns sin(x), stores cos(x).
inline float sincos(float x, float& cosine) {
  cosine = __builtin_cosf(x);
  return __builtin_sinf(x);
}
inline half sincos(half x, half& cosine) {
  cosine = half(__builtin_cosf(float(x)));
  return half(__builtin_sinf(float(x)));
}
inline bfloat sincos(bfloat x, bfloat& cosine) {
  cosine = bfloat(__builtin_cosf(float(x)));
  return bfloat(__builtin_sinf(float(x)));
}
template <class T, int N, bool P, bool Q, std::enable_if_t<etm_msl::is_float_scalar_v<T>, int> = 0>
inline etm_vec::vector<T, N, false> sincos(const etm_vec::vector<T, N, P>& x, etm_vec::vector<T, N, Q>& cosine) {
  etm_vec::vector<T, N, false> result(etm_msl::zero_tag{});
  for (int i = 0; i < N; ++i) result[i] = sincos(x[i], cosine[i]);
  return result;
}

// Geometric functions.
template <class A, class B, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B> &&
                                                 etm_msl::is_vector_like_v<A> && etm_msl::is_vector_like_v<B>,
                                             int> = 0>
inline etm_msl::element_t<A> dot(const A& x, const B& y) {
  using E = etm_msl::element_t<A>;
  float sum = 0.0f;
  for (int i = 0; i < etm_msl::components_v<A>; ++i) sum += float(x[i]) * float(y[i]);
  return E(sum);
}
template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>
inline etm_msl::element_t<V> length_squared(const V& x) {
  return dot(x, x);
}
template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>
inline etm_msl::element_t<V> length(const V& x) {
  float sum = 0.0f;
  for (int i = 0; i < etm_msl::components_v<V>; ++i) sum += float(x[i]) * float(x[i]);
  return etm_msl::element_t<V>(__builtin_sqrtf(sum));
}
template <class A, class B, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B>, int> = 0>
inline etm_msl::element_t<etm_msl::common_vector_t<A, B>> distance(const A& x, const B& y) {
  return length(etm_msl::common_vector_t<A, B>(x) - etm_msl::common_vector_t<A, B>(y));
}
template <class A, class B, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B>, int> = 0>
inline etm_msl::element_t<etm_msl::common_vector_t<A, B>> distance_squared(const A& x, const B& y) {
  return length_squared(etm_msl::common_vector_t<A, B>(x) - etm_msl::common_vector_t<A, B>(y));
}
template <class V, std::enable_if_t<etm_msl::is_float_vector_like_v<V>, int> = 0>
inline etm_msl::plain_vector_t<V> normalize(const V& x) {
  const etm_msl::plain_vector_t<V> v = x;
  return v * etm_msl::element_t<V>(1.0f / float(length(v)));
}
template <class A, class B, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B> &&
                                                 etm_msl::components_v<A> == 3 && etm_msl::components_v<B> == 3,
                                             int> = 0>
inline etm_msl::plain_vector_t<A> cross(const A& x, const B& y) {
  const etm_msl::plain_vector_t<A> a = x, b = y;
  return etm_msl::plain_vector_t<A>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
template <class A, class B, class C, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B, C>, int> = 0>
inline etm_msl::common_vector_t<A, B, C> faceforward(const A& n, const B& incident, const C& reference) {
  const etm_msl::common_vector_t<A, B, C> normal = n;
  return float(dot(etm_msl::common_vector_t<A, B, C>(reference), etm_msl::common_vector_t<A, B, C>(incident))) < 0.0f
             ? normal
             : -normal;
}
template <class A, class B, std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B>, int> = 0>
inline etm_msl::common_vector_t<A, B> reflect(const A& incident, const B& normal) {
  using V = etm_msl::common_vector_t<A, B>;
  const V i = incident, n = normal;
  return i - n * (etm_msl::element_t<V>(2.0f) * dot(n, i));
}
template <class A, class B, class E,
          std::enable_if_t<etm_msl::are_float_vector_arguments_v<A, B> && etm_msl::is_scalar_v<E>, int> = 0>
inline etm_msl::common_vector_t<A, B> refract(const A& incident, const B& normal, E eta) {
  using V = etm_msl::common_vector_t<A, B>;
  const V i = incident, n = normal;
  const float cos_incident = float(dot(n, i));
  const float k = 1.0f - float(eta) * float(eta) * (1.0f - cos_incident * cos_incident);
  if (k < 0.0f) return V(etm_msl::element_t<V>(0.0f));
  return i * etm_msl::element_t<V>(eta) - n * etm_msl::element_t<V>(float(eta) * cos_incident + __builtin_sqrtf(k));
}

}  // namespace metal

#undef ETM_FLOAT_FUNCTION_1
#undef ETM_FLOAT_FUNCTION_2
#undef ETM_FLOAT_FUNCTION_3
#undef ETM_FLOAT_PREDICATE_1
#undef ETM_FLOAT_PREDICATE_2

// metal::fast and metal::precise: the same code (the CPU has one precision). As in Apple's
// library, their transcendental functions exist for float only (scalars and float vectors):
// other scalar arguments convert to float, so precise::atan2(half, float) is float where
// metal::atan2 would be ambiguous, and a half vector is no argument of theirs.
#define ETM_FLOAT_ONLY_MATH_NAMES(X)                                                           \
  X(acos) X(acosh) X(asin) X(asinh) X(atan) X(atan2) X(atanh) X(cos) X(cosh) X(cospi)        \
  X(divide) X(exp) X(exp2) X(exp10) X(log) X(log2) X(log10) X(pow) X(powr) X(rsqrt) X(sin)   \
  X(sinh) X(sinpi) X(sqrt) X(tan) X(tanh) X(tanpi)
#define ETM_MATH_NAMES(X)                                                                      \
  X(ceil) X(copysign) X(fabs) X(abs) X(fdim) X(floor) X(fma)                                 \
  X(fmax) X(fmax3) X(fmedian3) X(fmin) X(fmin3) X(fmod) X(fract) X(frexp) X(ilogb) X(ldexp)  \
  X(modf) X(nextafter) X(rint) X(round) X(sincos) X(trunc) X(clamp) X(saturate)              \
  X(sign) X(smoothstep) X(step) X(mix) X(max) X(min) X(max3) X(min3) X(median3) X(distance)  \
  X(length) X(normalize) X(isfinite) X(isinf) X(isnan)
namespace etm_msl {
template <class A, bool = is_vector_like_v<A>>
struct is_float_math_argument : std::is_convertible<const A&, float> {};
template <class A>
struct is_float_math_argument<A, true> : std::is_same<element_t<A>, float> {};
template <class A>
constexpr decltype(auto) float_math_argument(const A& x) {
  if constexpr (is_vector_like_v<A>) {
    return x;
  } else {
    return float(x);
  }
}
}  // namespace etm_msl
#define ETM_FLOAT_ONLY_NAME(name)                                                               \
  template <class... A, std::enable_if_t<(etm_msl::is_float_math_argument<A>::value && ...), int> = 0> \
  inline auto name(const A&... x)->decltype(::metal::name(etm_msl::float_math_argument(x)...)) {  \
    return ::metal::name(etm_msl::float_math_argument(x)...);                                  \
  }
#define ETM_USING_METAL_NAME(name) using ::metal::name;
namespace metal {
namespace fast {
ETM_FLOAT_ONLY_MATH_NAMES(ETM_FLOAT_ONLY_NAME)
ETM_MATH_NAMES(ETM_USING_METAL_NAME)
}
namespace precise {
ETM_FLOAT_ONLY_MATH_NAMES(ETM_FLOAT_ONLY_NAME)
ETM_MATH_NAMES(ETM_USING_METAL_NAME)
}
}  // namespace metal
#undef ETM_FLOAT_ONLY_NAME
#undef ETM_FLOAT_ONLY_MATH_NAMES
#undef ETM_USING_METAL_NAME
#undef ETM_MATH_NAMES
