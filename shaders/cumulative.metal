// cumprod, cummax / cummin and logcumsumexp along one dimension (ATen semantics): one thread
// per line (the elements along the dimension), which runs through its line in order.
//   cumprod       elements converted to the output dtype first (torch casts before it
//                 multiplies); in order along the line, as torch multiplies: float16 and
//                 bfloat16 outputs in float32, float32 outputs in a double-like product
//                 (WideProduct), integer outputs in 64-bit wrapping products. A parallel scan
//                 would reorder the products; in-order keeps torch's results where an
//                 intermediate product overflows, underflows or meets a zero, inf or NaN.
//   cummax/min    running extreme and the index where it was last reached (ties move the
//                 index forward); once a NaN appears it is the extreme from then on.
//   logcumsumexp  running log(sum(exp)), accumulated in float32 as max + log1p(exp(min - max)).
#include <metal_stdlib>
using namespace metal;
#include "params/cumulative.h"
template <typename Out> struct ProductAccumulator { typedef long type; };
template <> struct ProductAccumulator<float> { typedef float type; };
template <> struct ProductAccumulator<half> { typedef float type; };
template <> struct ProductAccumulator<bfloat> { typedef float type; };

template <typename In, typename Out>
kernel void cumprod(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                    constant CumulativeParams& p [[buffer(2)]], uint line [[thread_position_in_grid]]) {
  typedef typename ProductAccumulator<Out>::type Acc;
  const LineOffsets at = line_offsets(p.layout, line);
  Acc product = Acc(1);
  for (uint i = 0; i < p.layout.length; ++i) {
    // Integer products wrap as torch's (two's complement) do: multiply as unsigned.
    const Acc term = Acc(Out(input[at.input + long(i) * p.layout.input_stride]));
    product = Acc(as_type<ulong>(long(product)) * as_type<ulong>(long(term)));
    output[at.values + long(i) * p.layout.values_stride] = Out(product);
  }
}

// torch's CPU kernel multiplies float32 elements in double and casts each running product to
// float. Metal has no double: the product is kept as (high + low) * 2^exponent, a float-float
// mantissa (about 48 bits, |high| in [0.5, 1)) and an integer exponent bounded as double's, so
// each output is the double product rounded to float but for rare last-bit ties. A product that
// is zero, infinite or NaN (in double's range) continues as a plain float, whose IEEE rules
// are double's.
struct WideProduct {
  float high;
  float low;
  int exponent;
  bool finite_nonzero;
  float special;  // the product while it is not finite_nonzero
};

inline WideProduct wide_one() { return WideProduct{0.5f, 0.0f, 1, true, 0.0f}; }

inline void multiply(thread WideProduct& w, float term) {
  if (!w.finite_nonzero) {
    w.special *= term;
    return;
  }
  if (term == 0.0f || !isfinite(term)) {
    w.finite_nonzero = false;
    w.special = copysign(1.0f, w.high) * term;
    return;
  }
  int term_exponent;
  const float mantissa = frexp(term, term_exponent);
  const float product = w.high * mantissa;
  const float low = fma(w.low, mantissa, fma(w.high, mantissa, -product));
  const float sum = product + low;
  int shift;
  w.high = frexp(sum, shift);
  w.low = ldexp(low - (sum - product), -shift);
  w.exponent += term_exponent + shift;
  if (w.exponent > 1024 || w.exponent < -1074) {  // past double's largest or smallest magnitude
    w.finite_nonzero = false;
    w.special = copysign(w.exponent > 0 ? INFINITY : 0.0f, w.high);
  }
}

inline float wide_value(WideProduct w) {
  return w.finite_nonzero ? ldexp(w.high + w.low, w.exponent) : w.special;
}

template <typename In, typename Out>
kernel void cumprod_float(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                          constant CumulativeParams& p [[buffer(2)]],
                          uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  float product = 1.0f;
  for (uint i = 0; i < p.layout.length; ++i) {
    product *= float(Out(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = Out(product);
  }
}

template <typename In>
kernel void cumprod_wide(device const In* input [[buffer(0)]], device float* output [[buffer(1)]],
                         constant CumulativeParams& p [[buffer(2)]],
                         uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  WideProduct product = wide_one();
  for (uint i = 0; i < p.layout.length; ++i) {
    multiply(product, float(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = wide_value(product);
  }
}

template <typename T> inline bool is_nan_value(T v) { return false; }
template <> inline bool is_nan_value(float v) { return isnan(v); }
template <> inline bool is_nan_value(half v) { return isnan(float(v)); }
template <> inline bool is_nan_value(bfloat v) { return isnan(float(v)); }

template <typename T, bool Max>
kernel void cumulative_extreme(device const T* input [[buffer(0)]], device T* values [[buffer(1)]],
                               device long* indices [[buffer(2)]],
                               constant CumulativeParams& p [[buffer(3)]],
                               uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  T best = input[at.input];
  long best_index = 0;
  for (uint i = 0; i < p.layout.length; ++i) {
    const T v = input[at.input + long(i) * p.layout.input_stride];
    const bool better = Max ? v >= best : v <= best;
    if (is_nan_value(v) || (!is_nan_value(best) && better)) {
      best = v;
      best_index = long(i);
    }
    values[at.values + long(i) * p.layout.values_stride] = best;
    indices[at.indices + long(i) * p.layout.indices_stride] = best_index;
  }
}

// log(1 + x) for x in [0, 1] (MSL has no log1p): Kahan's correction of log(1 + x).
inline float log_one_plus(float x) {
  const float u = 1.0f + x;
  return u == 1.0f ? x : log(u) * (x / (u - 1.0f));
}

// NaN in either operand propagates (MSL's min/max would drop it).
inline float log_add_exp(float x, float y) {
  if (isnan(x) || isnan(y)) return NAN;
  const float low = min(x, y);
  const float high = max(x, y);
  if (low != high || isfinite(low)) return high + log_one_plus(exp(low - high));
  return x;  // both infinite with one sign: x == y
}

template <typename T>
kernel void logcumsumexp(device const T* input [[buffer(0)]], device T* output [[buffer(1)]],
                         constant CumulativeParams& p [[buffer(2)]],
                         uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  float running = -INFINITY;
  for (uint i = 0; i < p.layout.length; ++i) {
    running = log_add_exp(running, float(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = T(running);
  }
}

#define CUMPROD_FLOAT(In, IN, Out, OUT)                                                  \
  template [[host_name("cumprod_" #IN "_" #OUT)]] [[kernel]]                            \
  decltype(cumprod_float<In, Out>) cumprod_float<In, Out>;
#define CUMPROD_INTEGER(In, IN, Out, OUT)                                                \
  template [[host_name("cumprod_" #IN "_" #OUT)]] [[kernel]]                            \
  decltype(cumprod<In, Out>) cumprod<In, Out>;
#define CUMPROD_WIDE(In, IN)                                                             \
  template [[host_name("cumprod_" #IN "_float")]] [[kernel]]                             \
  decltype(cumprod_wide<In>) cumprod_wide<In>;
#define CUMPROD_FLOAT_INPUT(In, IN)                                                      \
  CUMPROD_WIDE(In, IN)                                                                   \
  CUMPROD_FLOAT(In, IN, half, half)                                                      \
  CUMPROD_FLOAT(In, IN, bfloat, bfloat)
#define CUMPROD_INTEGER_INPUT(In, IN)                                                    \
  CUMPROD_INTEGER(In, IN, long, long)                                                    \
  CUMPROD_INTEGER(In, IN, int, int)                                                      \
  CUMPROD_WIDE(In, IN)

CUMPROD_FLOAT_INPUT(float, float)
CUMPROD_FLOAT_INPUT(half, half)
CUMPROD_FLOAT_INPUT(bfloat, bfloat)
CUMPROD_INTEGER_INPUT(long, long)
CUMPROD_INTEGER_INPUT(int, int)
CUMPROD_INTEGER_INPUT(short, short)
CUMPROD_INTEGER_INPUT(char, char)
CUMPROD_INTEGER_INPUT(uchar, uchar)
CUMPROD_INTEGER_INPUT(bool, bool)

#define EXTREME_KERNELS(T, NAME)                                                         \
  template [[host_name("cummax_" #NAME)]] [[kernel]]                                    \
  decltype(cumulative_extreme<T, true>) cumulative_extreme<T, true>;                    \
  template [[host_name("cummin_" #NAME)]] [[kernel]]                                    \
  decltype(cumulative_extreme<T, false>) cumulative_extreme<T, false>;

EXTREME_KERNELS(float, float)
EXTREME_KERNELS(half, half)
EXTREME_KERNELS(bfloat, bfloat)
EXTREME_KERNELS(long, long)
EXTREME_KERNELS(int, int)
EXTREME_KERNELS(short, short)
EXTREME_KERNELS(char, char)
EXTREME_KERNELS(uchar, uchar)
EXTREME_KERNELS(bool, bool)

template [[host_name("logcumsumexp_float")]] [[kernel]] decltype(logcumsumexp<float>) logcumsumexp<float>;
template [[host_name("logcumsumexp_half")]] [[kernel]] decltype(logcumsumexp<half>) logcumsumexp<half>;
template [[host_name("logcumsumexp_bfloat")]] [[kernel]] decltype(logcumsumexp<bfloat>) logcumsumexp<bfloat>;
