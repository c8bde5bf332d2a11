// 2-D pooling (ATen semantics): one thread per output element of [planes, OH, OW]; the window
// starts at (o * stride - padding) and skips positions outside the input.
// max_pool2d: the window steps by dilation. NaN wins (and stays; the last NaN gives the index);
//   the index is the flat position in the input plane (h * W + w), the window's first valid
//   position when nothing beats -infinity.
// avg_pool2d: the float sum of the window, divided by divisor (when not 0), else by the window's
//   size clipped to the padded input (count_include_pad) or to the input.
// adaptive_pool2d: output o covers input rows [floor(o * H / OH), ceil((o + 1) * H / OH)) (and
//   columns alike); the mean, or the maximum with its index as max_pool2d gives it.
//   adaptive_pool2d_window: the same with a threadgroup per output, for large windows.
#include <metal_stdlib>
using namespace metal;
#include "params/pooling.h"

template <typename T>
kernel void max_pool2d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                       device long* indices [[buffer(2)]], constant PoolParams& p [[buffer(3)]],
                       uint3 position [[thread_position_in_grid]]) {
  const uint ow = position.x, oh = position.y, plane = position.z;
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  int h0 = int(oh) * p.stride[0] - p.padding[0];
  int w0 = int(ow) * p.stride[1] - p.padding[1];
  const int h1 = min(h0 + (p.window[0] - 1) * p.dilation[0] + 1, int(p.height));
  const int w1 = min(w0 + (p.window[1] - 1) * p.dilation[1] + 1, int(p.width));
  while (h0 < 0) h0 += p.dilation[0];
  while (w0 < 0) w0 += p.dilation[1];
  long best_index = long(h0) * p.width + w0;
  float best = -INFINITY;
  for (int h = h0; h < h1; h += p.dilation[0]) {
    for (int w = w0; w < w1; w += p.dilation[1]) {
      const float value = float(base[long(h) * p.input_strides[2] + long(w) * p.input_strides[3]]);
      if (value > best || isnan(value)) {  // as ATen's CPU kernel: the last NaN's index
        best = value;
        best_index = long(h) * p.width + w;
      }
    }
  }
  const long out_offset = (long(plane) * p.out_height + oh) * p.out_width + ow;
  out[out_offset] = T(best);
  indices[out_offset] = best_index;
}

template <typename T>
kernel void avg_pool2d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                       constant PoolParams& p [[buffer(2)]], uint3 position [[thread_position_in_grid]]) {
  const uint ow = position.x, oh = position.y, plane = position.z;
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  int h0 = int(oh) * p.stride[0] - p.padding[0];
  int w0 = int(ow) * p.stride[1] - p.padding[1];
  int h1 = min(h0 + p.window[0], int(p.height) + p.padding[0]);
  int w1 = min(w0 + p.window[1], int(p.width) + p.padding[1]);
  const int padded_size = (h1 - h0) * (w1 - w0);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  h1 = min(h1, int(p.height));
  w1 = min(w1, int(p.width));
  const long out_offset = (long(plane) * p.out_height + oh) * p.out_width + ow;
  if (h0 >= h1 || w0 >= w1) {
    out[out_offset] = T(0);
    return;
  }
  float sum = 0.0f;
  for (int h = h0; h < h1; ++h) {
    for (int w = w0; w < w1; ++w) sum += float(base[long(h) * p.input_strides[2] + long(w) * p.input_strides[3]]);
  }
  const int divisor = p.divisor != 0 ? p.divisor : p.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0);
  out[out_offset] = T(sum / float(divisor));
}

template <typename T>
kernel void adaptive_pool2d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                            device long* indices [[buffer(2)]], constant PoolParams& p [[buffer(3)]],
                            constant uint& take_max [[buffer(4)]], uint3 position [[thread_position_in_grid]]) {
  const uint ow = position.x, oh = position.y, plane = position.z;
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  const long h0 = long(oh) * p.height / p.out_height, h1 = (long(oh + 1) * p.height + p.out_height - 1) / p.out_height;
  const long w0 = long(ow) * p.width / p.out_width, w1 = (long(ow + 1) * p.width + p.out_width - 1) / p.out_width;
  float sum = 0.0f, best = -INFINITY;
  long best_index = h0 * p.width + w0;
  for (long h = h0; h < h1; ++h) {
    for (long w = w0; w < w1; ++w) {
      const float value = float(base[h * p.input_strides[2] + w * p.input_strides[3]]);
      sum += value;
      if (value > best || isnan(value)) {
        best = value;
        best_index = h * p.width + w;
      }
    }
  }
  const long out_offset = (long(plane) * p.out_height + oh) * p.out_width + ow;
  if (take_max) {
    out[out_offset] = T(best);
    indices[out_offset] = best_index;
  } else {
    out[out_offset] = T(sum / float((h1 - h0) * (w1 - w0)));
  }
}

// A window's maximum so far and its flat index: a NaN beats any number (among NaNs the later
// index), then the larger value, then the earlier index among equals: what the in-order scan
// of adaptive_pool2d (value > best || isnan(value)) keeps, whatever order the parts come in.
struct WindowMax {
  float value;
  long index;
};

inline WindowMax better_of(WindowMax a, WindowMax b) {
  const bool a_nan = isnan(a.value), b_nan = isnan(b.value);
  if (a_nan || b_nan) return a_nan && b_nan ? (a.index > b.index ? a : b) : (a_nan ? a : b);
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.index < b.index ? a : b;
}

constant constexpr uint kWindowThreads = kAdaptiveWindowThreads;

struct WindowPart {
  float sum;
  WindowMax best;
};

// Thread t's elements of the window [h0, h1) x [w0, w1): k = t, t + kWindowThreads, ... in
// row-major order, stepped as (row, column) without dividing.
template <typename T>
inline WindowPart window_part(const device T* base, constant PoolParams& p, long h0, long h1, long w0, long w1,
                              uint t) {
  const long columns = w1 - w0, size = (h1 - h0) * columns;
  const long step_rows = long(kWindowThreads) / columns, step_columns = long(kWindowThreads) % columns;
  long h = h0 + long(t) / columns, w = w0 + long(t) % columns;
  WindowPart part = {0.0f, {-INFINITY, h0 * p.width + w0}};  // the first position when nothing beats -inf
  for (long k = t; k < size; k += kWindowThreads) {
    const float value = float(base[h * p.input_strides[2] + w * p.input_strides[3]]);
    part.sum += value;
    if (value > part.best.value || isnan(value)) part.best = WindowMax{value, h * p.width + w};
    h += step_rows;
    w += step_columns;
    if (w >= w1) {
      w -= columns;
      ++h;
    }
  }
  return part;
}

// One threadgroup of kWindowThreads per output: each thread takes its share of the window
// (window_part), then the group halves the partial sums and maxima in threadgroup memory.
template <typename T>
kernel void adaptive_pool2d_window(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                                   device long* indices [[buffer(2)]], constant PoolParams& p [[buffer(3)]],
                                   constant uint& take_max [[buffer(4)]],
                                   uint3 position [[threadgroup_position_in_grid]],
                                   uint t [[thread_index_in_threadgroup]]) {
  threadgroup float sums[kWindowThreads];
  threadgroup WindowMax maxima[kWindowThreads];
  const uint ow = position.x, oh = position.y, plane = position.z;
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  const long h0 = long(oh) * p.height / p.out_height, h1 = (long(oh + 1) * p.height + p.out_height - 1) / p.out_height;
  const long w0 = long(ow) * p.width / p.out_width, w1 = (long(ow + 1) * p.width + p.out_width - 1) / p.out_width;
  const WindowPart part = window_part(base, p, h0, h1, w0, w1, t);
  sums[t] = part.sum;
  maxima[t] = part.best;
  for (uint half_threads = kWindowThreads / 2; half_threads > 0; half_threads /= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < half_threads) {
      sums[t] += sums[t + half_threads];
      maxima[t] = better_of(maxima[t], maxima[t + half_threads]);
    }
  }
  if (t != 0) return;
  const long out_offset = (long(plane) * p.out_height + oh) * p.out_width + ow;
  if (take_max) {
    out[out_offset] = T(maxima[0].value);
    indices[out_offset] = maxima[0].index;
  } else {
    out[out_offset] = T(sums[0] / float((h1 - h0) * (w1 - w0)));
  }
}

#define INSTANTIATE_POOLS(T, name)                                                              \
  template [[host_name("max_pool2d_" #name)]] kernel void max_pool2d<T>(                          \
      const device T*, device T*, device long*, constant PoolParams&, uint3);                     \
  template [[host_name("avg_pool2d_" #name)]] kernel void avg_pool2d<T>(                          \
      const device T*, device T*, constant PoolParams&, uint3);                                    \
  template [[host_name("adaptive_pool2d_" #name)]] kernel void adaptive_pool2d<T>(                \
      const device T*, device T*, device long*, constant PoolParams&, constant uint&, uint3);         \
  template [[host_name("adaptive_pool2d_window_" #name)]] kernel void adaptive_pool2d_window<T>(  \
      const device T*, device T*, device long*, constant PoolParams&, constant uint&, uint3, uint);

INSTANTIATE_POOLS(float, float)
INSTANTIATE_POOLS(half, half)
INSTANTIATE_POOLS(bfloat, bfloat)
