// Direct convolution, forward and transposed, for 1-D, 2-D and 3-D problems (the host
// presents every problem as 3-D, with size-1 leading spatial dimensions). One thread per
// output element; products accumulate in float for every element type. Input, weight,
// bias and output are bound at their first element and indexed through the strides in
// ConvParams, so channels-last and other non-contiguous layouts need no copies.
#include <metal_stdlib>
using namespace metal;

struct ConvParams {
  long batch;
  long out_channels;
  long in_channels_per_group;
  long out_channels_per_group;
  long input_sizes[3];   // depth, height, width
  long output_sizes[3];
  long kernel_sizes[3];
  long stride[3];
  long padding[3];
  long dilation[3];
  long input_strides[5];   // batch, channel, depth, height, width
  long weight_strides[5];  // dim 0, dim 1, depth, height, width
  long output_strides[5];
  long bias_stride;
  int has_bias;
  int reserved;  // keeps the struct's size a multiple of 8 on both sides
};

// Forward: out[n, co, o] = bias[co] + sum over ci of group(co), k of
//   input[n, ci, o * stride - padding + k * dilation] * weight[co, ci - group start, k].
// Transposed (the gradient of forward with respect to its input): out[n, co, o] = bias[co] +
//   sum over ci of group(co), k with o = i * stride - padding + k * dilation of
//   input[n, ci, i] * weight[ci, co - group start, k].
template <typename T, bool Transposed>
kernel void convolution(device T* output [[buffer(0)]],
                        const device T* input [[buffer(1)]],
                        const device T* weight [[buffer(2)]],
                        const device T* bias [[buffer(3)]],
                        constant ConvParams& p [[buffer(4)]],
                        uint3 position [[thread_position_in_grid]]) {
  const long ow = position.x;
  const long oh = position.y % p.output_sizes[1];
  const long od = position.y / p.output_sizes[1];
  const long co = position.z % p.out_channels;
  const long n = position.z / p.out_channels;
  if (ow >= p.output_sizes[2] || od >= p.output_sizes[0] || n >= p.batch) return;

  const long group = co / p.out_channels_per_group;
  const long first_in_channel = group * p.in_channels_per_group;
  const device T* input_batch = input + n * p.input_strides[0];

  float sum = 0.0f;
  for (long ci = 0; ci < p.in_channels_per_group; ++ci) {
    const long channel = first_in_channel + ci;
    const device T* input_channel = input_batch + channel * p.input_strides[1];
    const device T* weight_channel = Transposed
        ? weight + channel * p.weight_strides[0] + (co - group * p.out_channels_per_group) * p.weight_strides[1]
        : weight + co * p.weight_strides[0] + ci * p.weight_strides[1];
    for (long kd = 0; kd < p.kernel_sizes[0]; ++kd) {
      long id;
      if (Transposed) {
        const long shifted = od + p.padding[0] - kd * p.dilation[0];
        if (shifted < 0 || shifted % p.stride[0] != 0) continue;
        id = shifted / p.stride[0];
      } else {
        id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
      }
      if (id < 0 || id >= p.input_sizes[0]) continue;
      for (long kh = 0; kh < p.kernel_sizes[1]; ++kh) {
        long ih;
        if (Transposed) {
          const long shifted = oh + p.padding[1] - kh * p.dilation[1];
          if (shifted < 0 || shifted % p.stride[1] != 0) continue;
          ih = shifted / p.stride[1];
        } else {
          ih = oh * p.stride[1] - p.padding[1] + kh * p.dilation[1];
        }
        if (ih < 0 || ih >= p.input_sizes[1]) continue;
        const device T* input_row = input_channel + id * p.input_strides[2] + ih * p.input_strides[3];
        const device T* weight_row = weight_channel + kd * p.weight_strides[2] + kh * p.weight_strides[3];
        for (long kw = 0; kw < p.kernel_sizes[2]; ++kw) {
          long iw;
          if (Transposed) {
            const long shifted = ow + p.padding[2] - kw * p.dilation[2];
            if (shifted < 0 || shifted % p.stride[2] != 0) continue;
            iw = shifted / p.stride[2];
          } else {
            iw = ow * p.stride[2] - p.padding[2] + kw * p.dilation[2];
          }
          if (iw < 0 || iw >= p.input_sizes[2]) continue;
          sum += float(input_row[iw * p.input_strides[4]]) * float(weight_row[kw * p.weight_strides[4]]);
        }
      }
    }
  }
  if (p.has_bias) sum += float(bias[co * p.bias_stride]);
  output[n * p.output_strides[0] + co * p.output_strides[1] + od * p.output_strides[2] +
         oh * p.output_strides[3] + ow * p.output_strides[4]] = T(sum);
}

#define INSTANTIATE_CONVOLUTION(T, SUFFIX)                                                        \
  template [[host_name("convolution_" #SUFFIX)]] kernel void convolution<T, false>(               \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);  \
  template [[host_name("convolution_transposed_" #SUFFIX)]] kernel void convolution<T, true>(     \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);

INSTANTIATE_CONVOLUTION(float, float32)
INSTANTIATE_CONVOLUTION(half, float16)
INSTANTIATE_CONVOLUTION(bfloat, bfloat16)
