// 2-D pooling (ATen semantics): one thread per output element of [planes, OH, OW]; the window
// starts at (o * stride - padding) and skips positions outside the input.
// max_pool2d: the window steps by dilation. NaN wins (and stays; the last NaN gives the index);
//   the index is the flat position in the input plane (h * W + w), the window's first valid
//   position when nothing beats -infinity.
// avg_pool2d: the float sum of the window, divided by divisor (when not 0), else by the window's
//   size clipped to the padded input (count_include_pad) or to the input.
// adaptive_pool2d: output o covers input rows [floor(o * H / OH), ceil((o + 1) * H / OH)) (and
//   columns alike); the mean, or the maximum with its index as max_pool2d gives it.
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

#define INSTANTIATE_POOLS(T, name)                                                              \
  template [[host_name("max_pool2d_" #name)]] kernel void max_pool2d<T>(                          \
      const device T*, device T*, device long*, constant PoolParams&, uint3);                     \
  template [[host_name("avg_pool2d_" #name)]] kernel void avg_pool2d<T>(                          \
      const device T*, device T*, constant PoolParams&, uint3);                                    \
  template [[host_name("adaptive_pool2d_" #name)]] kernel void adaptive_pool2d<T>(                \
      const device T*, device T*, device long*, constant PoolParams&, constant uint&, uint3);

INSTANTIATE_POOLS(float, float32)
INSTANTIATE_POOLS(half, float16)
INSTANTIATE_POOLS(bfloat, bfloat16)
