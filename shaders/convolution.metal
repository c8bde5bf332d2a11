// Convolution, forward and transposed, for 1-D, 2-D and 3-D problems (the host presents
// every problem as 3-D, with size-1 leading spatial dimensions): a direct kernel with one
// thread per output element, and for forward problems with enough output pixels, output
// channels per group and reduction depth, an implicit GEMM on simdgroup matrices. Products
// accumulate in float for every element type. Input, weight,
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

// Forward convolution as an implicit GEMM on simdgroup matrices, per group g:
//   out[pixel, co] = sum over r of patch[pixel, r] * weight[g * C_out/groups + co, r]
// with pixel = (n, od, oh, ow) and r = (ci, kd, kh, kw) flattened; patch[pixel, r] is the
// input value under tap r of output pixel `pixel` (zero in the padding). Same tiling as
// matmul_tiled<T, 2, 2>: four simdgroups, a 32 x 32 block of (pixels x output channels), 32-deep
// reduction steps staged in threadgroup memory as float.
constant constexpr uint kGemmBlock = 32;
constant constexpr uint kGemmDepth = 32;
constant constexpr uint kGemmThreads = 128;

template <typename T>
kernel void convolution_gemm(device T* output [[buffer(0)]],
                             const device T* input [[buffer(1)]],
                             const device T* weight [[buffer(2)]],
                             const device T* bias [[buffer(3)]],
                             constant ConvParams& p [[buffer(4)]],
                             threadgroup float* tiles [[threadgroup(0)]],
                             uint3 group_position [[threadgroup_position_in_grid]],
                             uint thread_index [[thread_index_in_threadgroup]],
                             uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float* patch_tile = tiles;                            // kGemmBlock x kGemmDepth
  threadgroup float* weight_tile = tiles + kGemmBlock * kGemmDepth;  // kGemmDepth x kGemmBlock

  const long pixels_per_image = p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2];
  const long pixels = p.batch * pixels_per_image;
  const long taps = p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2];
  const long depth = p.in_channels_per_group * taps;
  const long group = group_position.z;
  const long pixel0 = long(group_position.y) * kGemmBlock;
  const long column0 = long(group_position.x) * kGemmBlock;
  const long first_in_channel = group * p.in_channels_per_group;
  const long first_out_channel = group * p.out_channels_per_group;

  const uint simd_row = (simdgroup / 2) * 16;
  const uint simd_column = (simdgroup % 2) * 16;
  simdgroup_float8x8 accumulators[2][2];
  for (uint i = 0; i < 2; ++i) {
    for (uint j = 0; j < 2; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  for (long k0 = 0; k0 < depth; k0 += kGemmDepth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = thread_index; i < kGemmBlock * kGemmDepth; i += kGemmThreads) {
      const long pixel = pixel0 + i / kGemmDepth, r = k0 + i % kGemmDepth;
      float value = 0.0f;
      if (pixel < pixels && r < depth) {
        const long ow = pixel % p.output_sizes[2];
        const long oh = (pixel / p.output_sizes[2]) % p.output_sizes[1];
        const long od = (pixel / (p.output_sizes[2] * p.output_sizes[1])) % p.output_sizes[0];
        const long n = pixel / pixels_per_image;
        const long kw = r % p.kernel_sizes[2];
        const long kh = (r / p.kernel_sizes[2]) % p.kernel_sizes[1];
        const long kd = (r / (p.kernel_sizes[2] * p.kernel_sizes[1])) % p.kernel_sizes[0];
        const long ci = r / taps;
        const long id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
        const long ih = oh * p.stride[1] - p.padding[1] + kh * p.dilation[1];
        const long iw = ow * p.stride[2] - p.padding[2] + kw * p.dilation[2];
        if (id >= 0 && id < p.input_sizes[0] && ih >= 0 && ih < p.input_sizes[1] && iw >= 0 &&
            iw < p.input_sizes[2]) {
          value = float(input[n * p.input_strides[0] + (first_in_channel + ci) * p.input_strides[1] +
                              id * p.input_strides[2] + ih * p.input_strides[3] + iw * p.input_strides[4]]);
        }
      }
      patch_tile[i] = value;
    }
    for (uint i = thread_index; i < kGemmDepth * kGemmBlock; i += kGemmThreads) {
      const long r = k0 + i / kGemmBlock, column = column0 + i % kGemmBlock;
      float value = 0.0f;
      if (r < depth && column < p.out_channels_per_group) {
        const long kw = r % p.kernel_sizes[2];
        const long kh = (r / p.kernel_sizes[2]) % p.kernel_sizes[1];
        const long kd = (r / (p.kernel_sizes[2] * p.kernel_sizes[1])) % p.kernel_sizes[0];
        const long ci = r / taps;
        value = float(weight[(first_out_channel + column) * p.weight_strides[0] + ci * p.weight_strides[1] +
                             kd * p.weight_strides[2] + kh * p.weight_strides[3] + kw * p.weight_strides[4]]);
      }
      weight_tile[i] = value;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint kk = 0; kk < kGemmDepth; kk += 8) {
      simdgroup_float8x8 patch_fragments[2];
      simdgroup_float8x8 weight_fragments[2];
      for (uint i = 0; i < 2; ++i) {
        simdgroup_load(patch_fragments[i], patch_tile, kGemmDepth, ulong2(kk, simd_row + 8 * i));
        simdgroup_load(weight_fragments[i], weight_tile, kGemmBlock, ulong2(simd_column + 8 * i, kk));
      }
      for (uint i = 0; i < 2; ++i) {
        for (uint j = 0; j < 2; ++j) {
          simdgroup_multiply_accumulate(accumulators[i][j], patch_fragments[i], weight_fragments[j],
                                        accumulators[i][j]);
        }
      }
    }
  }

  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup float* results = tiles;
  for (uint i = 0; i < 2; ++i) {
    for (uint j = 0; j < 2; ++j) {
      simdgroup_store(accumulators[i][j], results, kGemmBlock, ulong2(simd_column + 8 * j, simd_row + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = thread_index; i < kGemmBlock * kGemmBlock; i += kGemmThreads) {
    const long pixel = pixel0 + i / kGemmBlock, column = column0 + i % kGemmBlock;
    if (pixel >= pixels || column >= p.out_channels_per_group) continue;
    const long co = first_out_channel + column;
    const long ow = pixel % p.output_sizes[2];
    const long oh = (pixel / p.output_sizes[2]) % p.output_sizes[1];
    const long od = (pixel / (p.output_sizes[2] * p.output_sizes[1])) % p.output_sizes[0];
    const long n = pixel / pixels_per_image;
    float sum = results[i];
    if (p.has_bias) sum += float(bias[co * p.bias_stride]);
    output[n * p.output_strides[0] + co * p.output_strides[1] + od * p.output_strides[2] +
           oh * p.output_strides[3] + ow * p.output_strides[4]] = T(sum);
  }
}

#define INSTANTIATE_CONVOLUTION(T, SUFFIX)                                                        \
  template [[host_name("convolution_" #SUFFIX)]] kernel void convolution<T, false>(               \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);  \
  template [[host_name("convolution_transposed_" #SUFFIX)]] kernel void convolution<T, true>(     \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);  \
  template [[host_name("convolution_gemm_" #SUFFIX)]] kernel void convolution_gemm<T>(             \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&,          \
      threadgroup float*, uint3, uint, uint);

INSTANTIATE_CONVOLUTION(float, float32)
INSTANTIATE_CONVOLUTION(half, float16)
INSTANTIATE_CONVOLUTION(bfloat, bfloat16)
