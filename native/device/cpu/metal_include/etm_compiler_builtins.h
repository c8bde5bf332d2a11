// The `__metal_*` compiler builtins that Apple's library is written with and that some MSL
// code calls directly (MLX's bf16_math.h wraps them to add bfloat overloads). Each forwards to
// the library function of the same name; the math-mode argument makes no difference on the CPU.
#pragma once

#include "etm_simd.h"

namespace etm_msl {
enum class math_mode { precise, fast, maybe_fast };
}  // namespace etm_msl

#define __METAL_PRECISE_MATH__ (::etm_msl::math_mode::precise)
#define __METAL_FAST_MATH__ (::etm_msl::math_mode::fast)
#define __METAL_MAYBE_FAST_MATH__ (::etm_msl::math_mode::maybe_fast)

#define ETM_MATH_BUILTIN_1(name) \
  template <class T, class... Mode> inline auto __metal_##name(T x, Mode...) { return ::metal::name(x); }
#define ETM_MATH_BUILTIN_2(name)                                   \
  template <class T, class... Mode> inline auto __metal_##name(T x, T y, Mode...) { \
    return ::metal::name(x, y);                                    \
  }
#define ETM_MATH_BUILTIN_3(name)                                             \
  template <class T, class... Mode> inline auto __metal_##name(T x, T y, T z, Mode...) { \
    return ::metal::name(x, y, z);                                           \
  }
ETM_MATH_BUILTIN_1(acos)
ETM_MATH_BUILTIN_1(acosh)
ETM_MATH_BUILTIN_1(asin)
ETM_MATH_BUILTIN_1(asinh)
ETM_MATH_BUILTIN_1(atan)
ETM_MATH_BUILTIN_1(atanh)
ETM_MATH_BUILTIN_1(ceil)
ETM_MATH_BUILTIN_1(cos)
ETM_MATH_BUILTIN_1(cosh)
ETM_MATH_BUILTIN_1(cospi)
ETM_MATH_BUILTIN_1(exp)
ETM_MATH_BUILTIN_1(exp2)
ETM_MATH_BUILTIN_1(exp10)
ETM_MATH_BUILTIN_1(fabs)
ETM_MATH_BUILTIN_1(floor)
ETM_MATH_BUILTIN_1(fract)
ETM_MATH_BUILTIN_1(log)
ETM_MATH_BUILTIN_1(log2)
ETM_MATH_BUILTIN_1(log10)
ETM_MATH_BUILTIN_1(rint)
ETM_MATH_BUILTIN_1(round)
ETM_MATH_BUILTIN_1(rsqrt)
ETM_MATH_BUILTIN_1(sin)
ETM_MATH_BUILTIN_1(sinh)
ETM_MATH_BUILTIN_1(sinpi)
ETM_MATH_BUILTIN_1(sqrt)
ETM_MATH_BUILTIN_1(tan)
ETM_MATH_BUILTIN_1(tanh)
ETM_MATH_BUILTIN_1(tanpi)
ETM_MATH_BUILTIN_1(trunc)
ETM_MATH_BUILTIN_2(atan2)
ETM_MATH_BUILTIN_2(divide)
ETM_MATH_BUILTIN_2(fmax)
ETM_MATH_BUILTIN_2(fmin)
ETM_MATH_BUILTIN_2(fmod)
ETM_MATH_BUILTIN_2(nextafter)
ETM_MATH_BUILTIN_2(pow)
ETM_MATH_BUILTIN_2(powr)
ETM_MATH_BUILTIN_3(fma)
ETM_MATH_BUILTIN_3(fmax3)
ETM_MATH_BUILTIN_3(fmin3)
ETM_MATH_BUILTIN_3(fmedian3)
#undef ETM_MATH_BUILTIN_1
#undef ETM_MATH_BUILTIN_2
#undef ETM_MATH_BUILTIN_3

template <class T, class... Mode> inline auto __metal_ldexp(T x, int k, Mode...) { return ::metal::ldexp(x, k); }
template <class T> inline auto __metal_frexp(T x, int* exponent) { return ::metal::frexp(x, *exponent); }

// SIMD-group builtins: the site is the builtin's caller, as for the library functions.
#define ETM_SIMD_BUILTIN_1(name)                                        \
  template <class T> inline T __metal_##name(T data, ETM_CALL_SITE_PARAMETER) { \
    return ::metal::name(data, ETM_CALL_SITE_ARGUMENTS);                \
  }
#define ETM_SIMD_BUILTIN_2(name)                                                    \
  template <class T> inline T __metal_##name(T data, ushort amount, ETM_CALL_SITE_PARAMETER) { \
    return ::metal::name(data, amount, ETM_CALL_SITE_ARGUMENTS);                    \
  }
ETM_SIMD_BUILTIN_1(simd_sum)
ETM_SIMD_BUILTIN_1(simd_product)
ETM_SIMD_BUILTIN_1(simd_min)
ETM_SIMD_BUILTIN_1(simd_max)
ETM_SIMD_BUILTIN_1(simd_and)
ETM_SIMD_BUILTIN_1(simd_or)
ETM_SIMD_BUILTIN_1(simd_xor)
ETM_SIMD_BUILTIN_1(simd_prefix_inclusive_sum)
ETM_SIMD_BUILTIN_1(simd_prefix_exclusive_sum)
ETM_SIMD_BUILTIN_1(simd_prefix_inclusive_product)
ETM_SIMD_BUILTIN_1(simd_prefix_exclusive_product)
ETM_SIMD_BUILTIN_1(simd_broadcast_first)
ETM_SIMD_BUILTIN_2(simd_broadcast)
ETM_SIMD_BUILTIN_2(simd_shuffle)
ETM_SIMD_BUILTIN_2(simd_shuffle_up)
ETM_SIMD_BUILTIN_2(simd_shuffle_down)
ETM_SIMD_BUILTIN_2(simd_shuffle_xor)
ETM_SIMD_BUILTIN_2(simd_shuffle_rotate_up)
ETM_SIMD_BUILTIN_2(simd_shuffle_rotate_down)
#undef ETM_SIMD_BUILTIN_1
#undef ETM_SIMD_BUILTIN_2

template <class T>
inline T __metal_simd_shuffle_and_fill_up(T data, T filling_data, ushort delta, ushort modulo,
                                          ETM_CALL_SITE_PARAMETER) {
  return ::metal::simd_shuffle_and_fill_up(data, filling_data, delta, modulo, ETM_CALL_SITE_ARGUMENTS);
}
template <class T>
inline T __metal_simd_shuffle_and_fill_down(T data, T filling_data, ushort delta, ushort modulo,
                                            ETM_CALL_SITE_PARAMETER) {
  return ::metal::simd_shuffle_and_fill_down(data, filling_data, delta, modulo, ETM_CALL_SITE_ARGUMENTS);
}

// The simdgroup width (the argument only selects the result type).
template <class T> constexpr T __metal_get_simdgroup_size(T) { return T(32); }

// The caller's lane, from a collective that exchanges nothing.
template <class T> inline T __metal_get_thread_index_in_simdgroup(T, ETM_CALL_SITE_PARAMETER) {
  return T(etm_msl::current_lane(ETM_CALL_SITE));
}
