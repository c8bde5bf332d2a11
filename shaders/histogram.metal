// histc (ATen's histogram with equal-width bins), in three kernels:
//   histc_range   one threadgroup: the data's [min, max] when the caller gave min == max
//                 (NaN propagates; an empty range is widened to [min - 1, max + 1]);
//   histc_count   one thread per element: its bin, by torch's rule (below), counted with a
//                 relaxed atomic add into 32-bit counters;
//   histc_store   one thread per bin: the count in the output dtype.
// Bin positions are computed in float32 (for half and bfloat inputs, on the converted value).
// torch's rule: elements outside [lo, hi] (and NaN) are skipped; pos = (v - lo) * bins /
// (hi - lo), truncated, then corrected against the bin edges linspace(lo, hi, bins + 1) by a
// search among the neighbouring edges; v == hi falls into the last bin.
#include <metal_stdlib>
using namespace metal;
#include "params/histogram.h"

constant constexpr uint kRangeThreads = 256;

// NaN-propagating min and max (MSL's min/max return the other operand for NaN).
inline float min_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : min(a, b); }
inline float max_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : max(a, b); }

template <typename T>
kernel void histc_range(constant T* self [[buffer(0)]], device float* range [[buffer(1)]],
                        constant HistcParams& p [[buffer(2)]],
                        uint t [[thread_index_in_threadgroup]],
                        uint n [[threads_per_threadgroup]]) {
  threadgroup float low[kRangeThreads];
  threadgroup float high[kRangeThreads];
  float lo = INFINITY, hi = -INFINITY;
  for (uint i = t; i < p.numel; i += n) {
    const float v = float(self[element_offset(i, p.sizes, p.strides, p.dims)]);
    lo = min_nan(lo, v);
    hi = max_nan(hi, v);
  }
  low[t] = lo;
  high[t] = hi;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t != 0) return;
  for (uint k = 1; k < n; ++k) {
    lo = min_nan(lo, low[k]);
    hi = max_nan(hi, high[k]);
  }
  if (lo == hi) {
    lo -= 1.0f;
    hi += 1.0f;
  }
  range[0] = lo;
  range[1] = hi;
}

// Edge i of linspace(lo, hi, bins + 1), computed as torch's linspace does (from the nearer end).
inline float bin_edge(float lo, float hi, uint bins, long i) {
  const float step = (hi - lo) / float(bins);
  const long steps = long(bins) + 1;
  return i < steps / 2 ? lo + step * float(i) : hi - step * float(steps - i - 1);
}

template <typename T>
kernel void histc_count(constant T* self [[buffer(0)]], device atomic_uint* counts [[buffer(1)]],
                        constant float* range [[buffer(2)]], constant HistcParams& p [[buffer(3)]],
                        uint i [[thread_position_in_grid]]) {
  const float lo = range[0], hi = range[1];
  if (!isfinite(lo) || !isfinite(hi) || !(lo < hi)) return;  // reported by the host's check
  const float v = float(self[element_offset(i, p.sizes, p.strides, p.dims)]);
  if (!(v >= lo && v <= hi)) return;
  const long bins = long(p.bins);
  long pos = long((v - lo) * float(bins) / (hi - lo));
  // The first edge greater than v, among edges [pos - 1, pos + 2), minus one.
  long edge = max(pos - 1, 0L);
  const long end = min(pos + 2, bins + 1);
  while (edge < end && bin_edge(lo, hi, p.bins, edge) <= v) ++edge;
  pos = edge - 1;
  if (pos == bins) pos -= 1;
  atomic_fetch_add_explicit(&counts[pos], 1u, memory_order_relaxed);
}

template <typename T>
kernel void histc_store(constant uint* counts [[buffer(0)]], device T* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  out[i] = T(float(counts[i]));
}

#define HISTC_KERNELS(T, NAME)                                                       \
  template [[host_name("histc_range_" #NAME)]] [[kernel]]                           \
  decltype(histc_range<T>) histc_range<T>;                                          \
  template [[host_name("histc_count_" #NAME)]] [[kernel]]                           \
  decltype(histc_count<T>) histc_count<T>;                                          \
  template [[host_name("histc_store_" #NAME)]] [[kernel]]                           \
  decltype(histc_store<T>) histc_store<T>;

HISTC_KERNELS(float, float32)
HISTC_KERNELS(half, float16)
HISTC_KERNELS(bfloat, bfloat16)
