// histc (ATen's histogram with equal-width bins), in up to four kernels:
//   histc_range_partial  many threadgroups, each the [min, max] of its share of the elements
//                        (when the caller gave min == max; NaN propagates);
//   histc_range          one threadgroup: the partials combined (an empty range is widened
//                        to [min - 1, max + 1]);
//   histc_count          many threadgroups, each counting its share of the elements into a
//                        histogram in threadgroup memory, then adding its nonzero bins to the
//                        32-bit device counters (one atomic add per bin and threadgroup);
//                        histc_count_global, for more bins than threadgroup memory holds,
//                        adds each element to the device counters;
//   histc_store          one thread per bin: the count in the output dtype.
// Bin positions are computed in float32 (for half and bfloat inputs, on the converted value).
// torch's rule (its LINEAR_INTERPOLATION, without the local search among the bin edges that
// torch.histogram adds): elements outside [lo, hi] (and NaN) are skipped; pos = (v - lo) *
// bins / (hi - lo) in float32, truncated; v == hi falls into the last bin.
#include <metal_stdlib>
using namespace metal;
#include "params/histogram.h"

constant constexpr uint kRangeThreads = 256;

// NaN-propagating min and max (MSL's min/max return the other operand for NaN).
inline float min_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : min(a, b); }
inline float max_nan(float a, float b) { return (isnan(a) || isnan(b)) ? NAN : max(a, b); }

// The range and sum kernels reduce their threads' values in threadgroup memory by halving,
// each in its own body: the CPU device runs a kernel whose barriers sit in a helper function
// on fibers, far slower than its barrier regions.
template <typename T>
kernel void histc_range_partial(constant T* self [[buffer(0)]], device float2* partials [[buffer(1)]],
                                constant HistcParams& p [[buffer(2)]],
                                uint group [[threadgroup_position_in_grid]],
                                uint groups [[threadgroups_per_grid]],
                                uint t [[thread_index_in_threadgroup]]) {
  threadgroup float low[kHistcGroupThreads];
  threadgroup float high[kHistcGroupThreads];
  float lo = INFINITY, hi = -INFINITY;
  for (ulong i = ulong(group) * kHistcGroupThreads + t; i < p.numel; i += ulong(groups) * kHistcGroupThreads) {
    const float v = float(self[element_offset(uint(i), p.sizes, p.strides, p.dims)]);
    lo = min_nan(lo, v);
    hi = max_nan(hi, v);
  }
  low[t] = lo;
  high[t] = hi;
  for (uint half_span = kHistcGroupThreads / 2; half_span > 0; half_span /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_span) {
      low[t] = min_nan(low[t], low[t + half_span]);
      high[t] = max_nan(high[t], high[t + half_span]);
    }
  }
  if (t == 0) partials[group] = float2(low[0], high[0]);
}

kernel void histc_range(constant float2* partials [[buffer(0)]], device float* range [[buffer(1)]],
                        constant uint& count [[buffer(2)]],
                        uint t [[thread_index_in_threadgroup]]) {
  threadgroup float low[kHistcGroupThreads];
  threadgroup float high[kHistcGroupThreads];
  float lo = INFINITY, hi = -INFINITY;
  for (uint i = t; i < count; i += kHistcGroupThreads) {
    const float2 pair = partials[i];
    lo = min_nan(lo, pair.x);
    hi = max_nan(hi, pair.y);
  }
  low[t] = lo;
  high[t] = hi;
  for (uint half_span = kHistcGroupThreads / 2; half_span > 0; half_span /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_span) {
      low[t] = min_nan(low[t], low[t + half_span]);
      high[t] = max_nan(high[t], high[t + half_span]);
    }
  }
  if (t != 0) return;
  lo = low[0];
  hi = high[0];
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

// Element v's bin by torch's rule, or -1 when it is outside [lo, hi] or NaN.
inline long histc_bin(float v, float lo, float hi, uint bins) {
  if (!(v >= lo && v <= hi)) return -1;
  const long pos = long((v - lo) * float(bins) / (hi - lo));
  return pos == long(bins) ? pos - 1 : pos;
}

// A valid range: the host checks it (the given one before, the data's once the kernels ran).
inline bool usable_range(float lo, float hi) { return isfinite(lo) && isfinite(hi) && lo < hi; }

template <typename T>
kernel void histc_count(constant T* self [[buffer(0)]], device atomic_uint* counts [[buffer(1)]],
                        constant float* range [[buffer(2)]], constant HistcParams& p [[buffer(3)]],
                        uint group [[threadgroup_position_in_grid]],
                        uint groups [[threadgroups_per_grid]],
                        uint t [[thread_index_in_threadgroup]]) {
  threadgroup atomic_uint local[kHistcSharedBins];
  threadgroup float bounds[2];
  for (uint b = t; b < p.bins; b += kHistcGroupThreads) atomic_store_explicit(&local[b], 0u, memory_order_relaxed);
  if (t < 2) bounds[t] = range[t];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float lo = bounds[0], hi = bounds[1];
  if (usable_range(lo, hi)) {
    for (ulong i = ulong(group) * kHistcGroupThreads + t; i < p.numel; i += ulong(groups) * kHistcGroupThreads) {
      const long bin = histc_bin(float(self[element_offset(uint(i), p.sizes, p.strides, p.dims)]), lo, hi, p.bins);
      if (bin >= 0) atomic_fetch_add_explicit(&local[bin], 1u, memory_order_relaxed);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint b = t; b < p.bins; b += kHistcGroupThreads) {
    const uint count = atomic_load_explicit(&local[b], memory_order_relaxed);
    if (count != 0) atomic_fetch_add_explicit(&counts[b], count, memory_order_relaxed);
  }
}

template <typename T>
kernel void histc_count_global(constant T* self [[buffer(0)]], device atomic_uint* counts [[buffer(1)]],
                               constant float* range [[buffer(2)]], constant HistcParams& p [[buffer(3)]],
                               uint i [[thread_position_in_grid]]) {
  const float lo = range[0], hi = range[1];
  if (!usable_range(lo, hi)) return;
  const long bin = histc_bin(float(self[element_offset(i, p.sizes, p.strides, p.dims)]), lo, hi, p.bins);
  if (bin >= 0) atomic_fetch_add_explicit(&counts[bin], 1u, memory_order_relaxed);
}

template <typename T>
kernel void histc_store(constant uint* counts [[buffer(0)]], device T* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
  out[i] = T(float(counts[i]));
}

#define HISTC_KERNELS(T, NAME)                                                       \
  template [[host_name("histc_range_partial_" #NAME)]] [[kernel]]                   \
  decltype(histc_range_partial<T>) histc_range_partial<T>;                          \
  template [[host_name("histc_count_" #NAME)]] [[kernel]]                           \
  decltype(histc_count<T>) histc_count<T>;                                          \
  template [[host_name("histc_count_global_" #NAME)]] [[kernel]]                    \
  decltype(histc_count_global<T>) histc_count_global<T>;                            \
  template [[host_name("histc_store_" #NAME)]] [[kernel]]                           \
  decltype(histc_store<T>) histc_store<T>;

HISTC_KERNELS(float, float)
HISTC_KERNELS(half, half)
HISTC_KERNELS(bfloat, bfloat)

// torch.histogram / histogramdd with bin counts (ATen's histogramdd_bin_edges and its
// LINEAR_INTERPOLATION_WITH_LOCAL_SEARCH kernel), float32, in up to four kernels:
//   histogram_range_partial  without a given range: threadgroups (g, k), each the [min, max]
//                            (NaN propagating) of its share of coordinate k's values;
//   histogram_edges    one threadgroup per coordinate: its range (the given one, or its
//                      partials combined; [0, 1] without data; a point widened by 0.5 each
//                      side) and its edges linspace(lo, hi, bins + 1);
//   histogram_count    one thread per point: its bin in every coordinate (interpolated, then
//                      corrected against the edges), skipped when any coordinate is outside
//                      its edges or NaN; adds its weight (or 1) with a relaxed atomic add;
//                      histogram_count_shared, unweighted with few bins: many points a
//                      thread, counted per threadgroup in threadgroup memory;
//   histogram_total_partial, histogram_density  for density: partial sums of the bins over
//                      many threadgroups, then each bin divided by the total, then by its
//                      length in every coordinate, in torch's order.
kernel void histogram_range_partial(constant float* self [[buffer(0)]], device float2* partials [[buffer(1)]],
                                    constant HistogramParams& p [[buffer(2)]],
                                    uint2 group [[threadgroup_position_in_grid]],
                                    uint2 groups [[threadgroups_per_grid]],
                                    uint t [[thread_index_in_threadgroup]]) {
  threadgroup float low[kRangeThreads];
  threadgroup float high[kRangeThreads];
  const long column = long(group.y) * p.column_stride;
  float lo = INFINITY, hi = -INFINITY;
  for (ulong i = ulong(group.x) * kRangeThreads + t; i < p.rows; i += ulong(groups.x) * kRangeThreads) {
    const float v = self[element_offset(uint(i), p.sizes, p.strides, p.dims) + column];
    lo = min_nan(lo, v);
    hi = max_nan(hi, v);
  }
  low[t] = lo;
  high[t] = hi;
  for (uint half_span = kRangeThreads / 2; half_span > 0; half_span /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_span) {
      low[t] = min_nan(low[t], low[t + half_span]);
      high[t] = max_nan(high[t], high[t + half_span]);
    }
  }
  if (t == 0) partials[group.y * groups.x + group.x] = float2(low[0], high[0]);
}

kernel void histogram_edges(constant float2* partials [[buffer(0)]], device float* edges [[buffer(1)]],
                            constant HistogramParams& p [[buffer(2)]], constant uint& groups [[buffer(3)]],
                            uint k [[threadgroup_position_in_grid]],
                            uint t [[thread_index_in_threadgroup]],
                            uint n [[threads_per_threadgroup]]) {
  threadgroup float low[kRangeThreads];
  threadgroup float high[kRangeThreads];
  if (p.data_range) {
    float lo = INFINITY, hi = -INFINITY;
    for (uint i = t; i < groups; i += n) {
      const float2 pair = partials[k * groups + i];
      lo = min_nan(lo, pair.x);
      hi = max_nan(hi, pair.y);
    }
    low[t] = lo;
    high[t] = hi;
    for (uint half_span = kRangeThreads / 2; half_span > 0; half_span /= 2) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (t < half_span) {
        low[t] = min_nan(low[t], low[t + half_span]);
        high[t] = max_nan(high[t], high[t + half_span]);
      }
    }
    if (t == 0) {
      lo = low[0];
      hi = high[0];
      if (p.rows == 0) {
        lo = 0.0f;
        hi = 1.0f;
      }
      if (lo == hi) {
        lo -= 0.5f;
        hi += 0.5f;
      }
      low[0] = lo;
      high[0] = hi;
    }
  } else if (t == 0) {
    low[0] = p.low[k];
    high[0] = p.high[k];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float lo = low[0], hi = high[0];
  device float* row = edges + p.edge_offsets[k];
  for (uint i = t; i <= p.bins[k]; i += n) row[i] = bin_edge(lo, hi, p.bins[k], long(i));
}

// Point i's flat bin index, or -1 when it is skipped (a coordinate outside its edges or NaN;
// a range that is not finite is reported by the host's check). `edges` in constant or
// threadgroup memory.
template <typename Edges>
inline long point_bin(constant float* self, Edges edges, constant HistogramParams& p, uint i) {
  const long row = element_offset(i, p.sizes, p.strides, p.dims);
  uint index = 0;
  for (uint k = 0; k < p.columns; ++k) {
    const Edges e = edges + p.edge_offsets[k];
    const long bins = long(p.bins[k]);
    const float lo = e[0], hi = e[bins];
    if (!isfinite(lo) || !isfinite(hi)) return -1;
    const float v = self[row + long(k) * p.column_stride];
    if (!(v >= lo && v <= hi)) return -1;
    const long pos = long((v - lo) * float(bins) / (hi - lo));
    // The first edge greater than v, among edges [pos - 1, pos + 2), minus one.
    long edge = max(pos - 1, 0L);
    const long end = min(pos + 2, bins + 1);
    while (edge < end && e[edge] <= v) ++edge;
    const long bin = min(edge - 1, bins - 1);
    index = index * p.bins[k] + uint(bin);
  }
  return long(index);
}

kernel void histogram_count(constant float* self [[buffer(0)]], constant float* weight [[buffer(1)]],
                            constant float* edges [[buffer(2)]], device atomic_float* hist [[buffer(3)]],
                            constant HistogramParams& p [[buffer(4)]],
                            uint i [[thread_position_in_grid]]) {
  const long index = point_bin(self, edges, p, i);
  if (index < 0) return;
  const float w = p.weighted ? weight[element_offset(i, p.weight_sizes, p.weight_strides, p.weight_dims)] : 1.0f;
  atomic_fetch_add_explicit(&hist[index], w, memory_order_relaxed);
}

// Unweighted, with at most kHistogramSharedBins bins and kHistogramSharedEdges edges: each
// threadgroup copies the edges to threadgroup memory, counts its share of the points there,
// then adds its nonzero bins to hist (exact while a bin holds at most 2^24 points).
kernel void histogram_count_shared(constant float* self [[buffer(0)]], constant float* edges [[buffer(1)]],
                                   device atomic_float* hist [[buffer(2)]],
                                   constant HistogramParams& p [[buffer(3)]],
                                   constant uint& edge_count [[buffer(4)]],
                                   uint group [[threadgroup_position_in_grid]],
                                   uint groups [[threadgroups_per_grid]],
                                   uint t [[thread_index_in_threadgroup]]) {
  threadgroup atomic_uint local[kHistogramSharedBins];
  threadgroup float local_edges[kHistogramSharedEdges];
  for (uint b = t; b < p.hist_numel; b += kRangeThreads) atomic_store_explicit(&local[b], 0u, memory_order_relaxed);
  for (uint e = t; e < edge_count; e += kRangeThreads) local_edges[e] = edges[e];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (ulong i = ulong(group) * kRangeThreads + t; i < p.rows; i += ulong(groups) * kRangeThreads) {
    const long index = point_bin(self, &local_edges[0], p, uint(i));
    if (index >= 0) atomic_fetch_add_explicit(&local[index], 1u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint b = t; b < p.hist_numel; b += kRangeThreads) {
    const uint count = atomic_load_explicit(&local[b], memory_order_relaxed);
    if (count != 0) atomic_fetch_add_explicit(&hist[b], float(count), memory_order_relaxed);
  }
}

// The sum of threadgroup g's share of the bins (each thread's in order, then a tree).
kernel void histogram_total_partial(constant float* hist [[buffer(0)]], device float* partials [[buffer(1)]],
                                    constant HistogramParams& p [[buffer(2)]],
                                    uint group [[threadgroup_position_in_grid]],
                                    uint groups [[threadgroups_per_grid]],
                                    uint t [[thread_index_in_threadgroup]]) {
  threadgroup float partial[kRangeThreads];
  float sum = 0.0f;
  for (ulong j = ulong(group) * kRangeThreads + t; j < p.hist_numel; j += ulong(groups) * kRangeThreads) sum += hist[j];
  partial[t] = sum;
  for (uint half_span = kRangeThreads / 2; half_span > 0; half_span /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_span) partial[t] += partial[t + half_span];
  }
  if (t == 0) partials[group] = partial[0];
}

// Each threadgroup adds up the partial sums (the same way in every threadgroup), then divides
// its share of the bins.
kernel void histogram_density(device float* hist [[buffer(0)]], constant float* edges [[buffer(1)]],
                              constant HistogramParams& p [[buffer(2)]], constant float* partials [[buffer(3)]],
                              constant uint& partial_count [[buffer(4)]],
                              uint group [[threadgroup_position_in_grid]],
                              uint groups [[threadgroups_per_grid]],
                              uint t [[thread_index_in_threadgroup]]) {
  threadgroup float partial[kRangeThreads];
  float sum = 0.0f;
  for (uint i = t; i < partial_count; i += kRangeThreads) sum += partials[i];
  partial[t] = sum;
  for (uint half_span = kRangeThreads / 2; half_span > 0; half_span /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_span) partial[t] += partial[t + half_span];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float total = partial[0];
  for (ulong j = ulong(group) * kRangeThreads + t; j < p.hist_numel; j += ulong(groups) * kRangeThreads) {
    float value = hist[j] / total;
    uint rest = uint(j), stride = p.hist_numel;
    for (uint k = 0; k < p.columns; ++k) {
      stride /= p.bins[k];
      const uint edge = p.edge_offsets[k] + rest / stride;
      rest %= stride;
      value /= edges[edge + 1] - edges[edge];
    }
    hist[j] = value;
  }
}
