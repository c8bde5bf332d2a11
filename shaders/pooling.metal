// max_pool2d_with_indices (ATen semantics): one thread per output element of [planes, OH, OW];
// the window starts at (o * stride - padding), steps by dilation and skips positions outside
// the input. NaN wins (and stays); the index is the flat position in the input plane
// (h * W + w), the window's first valid position when nothing beats -infinity.
#include <metal_stdlib>
using namespace metal;

// Must match etm::ops::MaxPoolParams (native/ops/pooling.cpp).
struct MaxPoolParams {
  long input_strides[4];  // plane batch, plane channel, h, w
  uint channels;          // planes = batch * channels
  uint height;
  uint width;
  uint out_height;
  uint out_width;
  int window[2];            // kernel size (h, w)
  int stride[2];
  int padding[2];
  int dilation[2];
  uint pad;
};

template <typename T>
kernel void max_pool2d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                       device long* indices [[buffer(2)]], constant MaxPoolParams& p [[buffer(3)]],
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
      if (value > best || isnan(value)) {
        best = value;
        best_index = long(h) * p.width + w;
        if (isnan(value)) break;
      }
    }
    if (isnan(best)) break;
  }
  const long out_offset = (long(plane) * p.out_height + oh) * p.out_width + ow;
  out[out_offset] = T(best);
  indices[out_offset] = best_index;
}

#define INSTANTIATE_MAX_POOL(T, name)                                                              \
  template [[host_name("max_pool2d_" #name)]] kernel void max_pool2d<T>(                          \
      const device T*, device T*, device long*, constant MaxPoolParams&, uint3);

INSTANTIATE_MAX_POOL(float, float32)
INSTANTIATE_MAX_POOL(half, float16)
INSTANTIATE_MAX_POOL(bfloat, bfloat16)
