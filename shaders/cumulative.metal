// cumprod, cummax / cummin and logcumsumexp along one dimension (ATen semantics): one thread
// per line (the elements along the dimension), which runs through its line in order.
//   cumprod       elements converted to the output dtype first (torch casts before it
//                 multiplies); float32 products for floating outputs, 64-bit wrapping ones
//                 for integer outputs.
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
#define CUMPROD_FLOAT_INPUT(In, IN)                                                      \
  CUMPROD_FLOAT(In, IN, float, float)                                                    \
  CUMPROD_FLOAT(In, IN, half, half)                                                      \
  CUMPROD_FLOAT(In, IN, bfloat, bfloat)
#define CUMPROD_INTEGER_INPUT(In, IN)                                                    \
  CUMPROD_INTEGER(In, IN, long, long)                                                    \
  CUMPROD_INTEGER(In, IN, int, int)                                                      \
  CUMPROD_FLOAT(In, IN, float, float)

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
