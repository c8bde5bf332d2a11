// Pointwise fallbacks (ATen semantics): add (a + alpha * b), mul, pow, abs, gcd and angle over
// broadcast operands of any strides (up to 8 dimensions), one thread per element of the
// contiguous result. Operand and result dtypes are runtime codes (c10::ScalarType), so one
// kernel serves every dtype combination: floating results compute in float32, integer and bool
// results in 64-bit integers (wrapping as torch's kernels do), complex64 ones in float32 pairs
// (add, mul; abs and angle of a complex number are float32). Either operand may be a scalar.
#include <metal_stdlib>
using namespace metal;
#include "params/pointwise.h"

// Must match etm::ops::PointwiseOp.
constant constexpr uint kAdd = 0;
constant constexpr uint kMul = 1;
constant constexpr uint kPow = 2;
constant constexpr uint kAbs = 3;
constant constexpr uint kGcd = 4;
constant constexpr uint kAngle = 5;

// c10::ScalarType codes.
constant constexpr uint kUInt8 = 0;
constant constexpr uint kInt8 = 1;
constant constexpr uint kInt16 = 2;
constant constexpr uint kInt32 = 3;
constant constexpr uint kFloat16 = 5;
constant constexpr uint kFloat32 = 6;
constant constexpr uint kComplex64 = 9;
constant constexpr uint kBool = 11;
constant constexpr uint kBFloat16 = 15;

inline long load_integer(const device uchar* base, long i, uint dtype) {
  switch (dtype) {
    case kUInt8: return long(base[i]);
    case kBool: return base[i] != 0 ? 1 : 0;
    case kInt8: return long(((const device char*)base)[i]);
    case kInt16: return long(((const device short*)base)[i]);
    case kInt32: return long(((const device int*)base)[i]);
    default: return ((const device long*)base)[i];
  }
}

inline float load_float(const device uchar* base, long i, uint dtype) {
  switch (dtype) {
    case kFloat32: return ((const device float*)base)[i];
    case kFloat16: return float(((const device half*)base)[i]);
    case kBFloat16: return float(((const device bfloat*)base)[i]);
    default: return float(load_integer(base, i, dtype));
  }
}

// (real, imaginary); a real dtype's value as (x, 0).
inline float2 load_complex(const device uchar* base, long i, uint dtype) {
  if (dtype == kComplex64) return ((const device float2*)base)[i];
  return float2(load_float(base, i, dtype), 0.0f);
}

// |z| without overflow or underflow in the squares.
inline float complex_abs(float2 z) {
  const float a = fabs(z.x), b = fabs(z.y);
  if (isinf(a) || isinf(b)) return INFINITY;  // even with a NaN part, as hypot
  if (isnan(a) || isnan(b)) return a + b;
  const float largest = max(a, b), smallest = min(a, b);
  if (largest == 0.0f) return 0.0f;
  const float ratio = smallest / largest;
  return largest * sqrt(1.0f + ratio * ratio);
}

inline void store_integer(device uchar* base, long i, uint dtype, long value) {
  switch (dtype) {
    case kUInt8: base[i] = uchar(value); return;
    case kBool: base[i] = value != 0 ? 1 : 0; return;
    case kInt8: ((device char*)base)[i] = char(value); return;
    case kInt16: ((device short*)base)[i] = short(value); return;
    case kInt32: ((device int*)base)[i] = int(value); return;
    default: ((device long*)base)[i] = value; return;
  }
}

inline void store_float(device uchar* base, long i, uint dtype, float value) {
  switch (dtype) {
    case kFloat16: ((device half*)base)[i] = half(value); return;
    case kBFloat16: ((device bfloat*)base)[i] = bfloat(value); return;
    default: ((device float*)base)[i] = value; return;
  }
}

// Integer powers as torch computes them: by squaring, wrapping; a negative exponent gives 1 for
// base 1, +-1 for base -1 and 0 otherwise.
inline long integer_pow(long base, long exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  ulong result = 1, factor = ulong(base);
  while (exponent) {
    if (exponent & 1) result *= factor;
    factor *= factor;
    exponent >>= 1;
  }
  return long(result);
}

inline long integer_gcd(long a, long b) {
  ulong x = a < 0 ? 0 - ulong(a) : ulong(a), y = b < 0 ? 0 - ulong(b) : ulong(b);
  while (y != 0) {
    const ulong t = x % y;
    x = y;
    y = t;
  }
  return long(x);
}

// pow with C's rules for a negative base (an integral exponent gives a real result), which
// Metal's pow leaves undefined.
inline float real_pow(float x, float y) {
  if (x >= 0 || isnan(x) || y != floor(y)) return pow(x, y);
  const float magnitude = pow(-x, y);
  return fmod(y, 2.0f) != 0.0f ? -magnitude : magnitude;
}

kernel void pointwise(const device uchar* a [[buffer(0)]], const device uchar* b [[buffer(1)]],
                      device uchar* out [[buffer(2)]], constant PointwiseParams& p [[buffer(3)]],
                      uint index [[thread_position_in_grid]]) {
  long a_offset = 0, b_offset = 0;
  uint rest = index;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    const uint coordinate = rest % p.sizes[d];
    rest /= p.sizes[d];
    a_offset += long(coordinate) * p.a_strides[d];
    b_offset += long(coordinate) * p.b_strides[d];
  }
  if (p.math == kComplexMath) {
    const float2 x = p.a_is_scalar ? float2(p.scalar_float, 0.0f) : load_complex(a, a_offset, p.a_dtype);
    const float2 y = p.b_is_scalar ? float2(p.scalar_float, 0.0f) : load_complex(b, b_offset, p.b_dtype);
    switch (p.op) {
      case kAdd: ((device float2*)out)[index] = x + p.alpha_float * y; return;
      case kMul: ((device float2*)out)[index] = float2(x.x * y.x - x.y * y.y, x.x * y.y + x.y * y.x); return;
      case kAbs: store_float(out, index, p.out_dtype, complex_abs(x)); return;
      default: store_float(out, index, p.out_dtype, precise::atan2(x.y, x.x)); return;  // kAngle
    }
  }
  if (p.math == kIntegerMath) {
    const long x = p.a_is_scalar ? p.scalar_integer : load_integer(a, a_offset, p.a_dtype);
    const long y = p.b_is_scalar ? p.scalar_integer : load_integer(b, b_offset, p.b_dtype);
    long result;
    switch (p.op) {
      case kAdd: result = long(ulong(x) + ulong(p.alpha_integer) * ulong(y)); break;
      case kMul: result = long(ulong(x) * ulong(y)); break;
      case kPow: result = integer_pow(x, y); break;
      case kAbs: result = x < 0 ? long(0 - ulong(x)) : x; break;
      default: result = integer_gcd(x, y); break;
    }
    store_integer(out, index, p.out_dtype, result);
    return;
  }
  const float x = p.a_is_scalar ? p.scalar_float : load_float(a, a_offset, p.a_dtype);
  const float y = p.b_is_scalar ? p.scalar_float : load_float(b, b_offset, p.b_dtype);
  float result;
  switch (p.op) {
    case kAdd: result = x + p.alpha_float * y; break;
    case kMul: result = x * y; break;
    case kPow: result = real_pow(x, y); break;
    case kAbs: result = fabs(x); break;
    default: result = isnan(x) ? x : (x < 0 ? M_PI_F : 0.0f); break;  // kAngle of a real number
  }
  store_float(out, index, p.out_dtype, result);
}
