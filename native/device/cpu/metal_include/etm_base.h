// Foundation of the emulated Metal Shading Language standard library: every system header the
// library needs, the predefined macros of Apple's compiler, and the built-in scalar types.
//
// Every public <metal_*> header includes this first, so all system headers are in before
// etm_address_spaces.h turns `thread`, `device` ... into macros (libstdc++ uses `thread`).
// No <math.h>/<cmath>/<string.h>: they fill the global namespace with fabs, expm1f ... and
// MSL code (c10/metal) calls `::fabs(x)` and unqualified `expm1f` expecting Metal's meaning.
// Not <utility> either: libc++'s brings in <math.h>.
#pragma once

#ifndef __METAL__
#define __METAL__ 1
#endif
// >= 400 turns c10's IF_CONSTEXPR into `if constexpr` (this library is C++17 or newer).
#ifndef __METAL_VERSION__
#define __METAL_VERSION__ 400
#endif
#ifndef __HAVE_BFLOAT__
#define __HAVE_BFLOAT__ 1
#endif

#include <stddef.h>
#include <stdint.h>

#include <initializer_list>
#include <limits>
#include <type_traits>
#if __cplusplus >= 202002L
#include <source_location>
#endif

#include "etm_lane.h"
#include "etm_not_instrumented.h"

// Floating-point macros of Metal's <metal_math> / float.h, defined here because the host's
// float.h and math.h must stay out of the translation unit.
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (__builtin_huge_valf())
#endif
#ifndef HUGE_VALH
#define HUGE_VALH ((_Float16)__builtin_huge_valf())
#endif
#ifndef FLT_MAX
#define FLT_MAX 0x1.fffffep+127f
#endif
#ifndef FLT_MIN
#define FLT_MIN 0x1p-126f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 0x1p-23f
#endif
#ifndef FLT_MANT_DIG
#define FLT_MANT_DIG 24
#endif
#ifndef FLT_MAX_EXP
#define FLT_MAX_EXP 128
#endif
#ifndef FLT_MIN_EXP
#define FLT_MIN_EXP (-125)
#endif
#ifndef FLT_DIG
#define FLT_DIG 6
#endif
#ifndef HALF_MAX
#define HALF_MAX ((_Float16)65504.0f)
#endif
#ifndef HALF_MIN
#define HALF_MIN ((_Float16)0x1p-14f)
#endif
#ifndef HALF_EPSILON
#define HALF_EPSILON ((_Float16)0x1p-10f)
#endif
#ifndef MAXFLOAT
#define MAXFLOAT 0x1.fffffep+127f
#endif
#ifndef MAXHALF
#define MAXHALF ((_Float16)65504.0f)
#endif
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ((_Float16)M_E_F)
#define M_LOG2E_H ((_Float16)M_LOG2E_F)
#define M_LOG10E_H ((_Float16)M_LOG10E_F)
#define M_LN2_H ((_Float16)M_LN2_F)
#define M_LN10_H ((_Float16)M_LN10_F)
#define M_PI_H ((_Float16)M_PI_F)
#define M_PI_2_H ((_Float16)M_PI_2_F)
#define M_PI_4_H ((_Float16)M_PI_4_F)
#define M_1_PI_H ((_Float16)M_1_PI_F)
#define M_2_PI_H ((_Float16)M_2_PI_F)
#define M_2_SQRTPI_H ((_Float16)M_2_SQRTPI_F)
#define M_SQRT2_H ((_Float16)M_SQRT2_F)
#define M_SQRT1_2_H ((_Float16)M_SQRT1_2_F)

// Metal's function qualifier for non-kernel functions.
#define METAL_FUNC inline __attribute__((always_inline))

// Built-in scalar types. Metal's long is 64 bits, as on the LP64 hosts this library targets.
static_assert(sizeof(long) == 8, "the emulated Metal library needs a 64-bit long (LP64 host)");
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;

namespace etm_msl {
// Everything the library needs internally lives here, never in namespace metal: MSL code
// does `using namespace metal;` at global scope and must see Metal's names only.

template <class T> struct is_half : std::is_same<std::remove_cv_t<T>, _Float16> {};
}  // namespace etm_msl
