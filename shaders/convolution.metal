// Convolution, forward and transposed, for 1-D, 2-D and 3-D problems (the host presents
// every problem as 3-D, with size-1 leading spatial dimensions). Forward problems take, in the
// host's order of preference: a depthwise kernel staging each channel's input window once (one
// input channel per group); an implicit GEMM on simdgroup matrices over 2-D blocks of output
// pixels with the input window staged once per channel chunk (planes of at least 32 pixels and
// 4 rows; in the CPU launch shape the same blocks with register strips of sums instead of
// simdgroup matrices); an implicit GEMM over runs of 32 flattened output pixels (enough pixels, output
// channels per group and reduction depth); fewer output pixels than that, a patch matrix and
// one product per group on the matrix-product kernels (the weight read once) where the weight's
// per-channel blocks are dense; else a direct kernel with one thread per output element.
// Transposed problems whose kernel equals the stride (no padding or dilation) run as one GEMM
// scattered to the output phases (outputs whose index has the same residue modulo the
// stride); the others as one forward problem per phase (native/ops/convolution.cpp), the weight
// bound at its phase's first tap with negative tap strides; those with more phases than that is
// worth take the direct transposed kernel. Products accumulate in float for every element type.
// Input, weight, bias and output are bound at their first element and indexed through the
// strides in ConvParams, so channels-last and other non-contiguous layouts need no copies.
#include <metal_stdlib>
using namespace metal;
#include "params/convolution.h"

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
  const long column = co - group * p.out_channels_per_group;
  const device T* input_batch = input + n * p.input_strides[0];

  float sum = 0.0f;
  for (long ci = 0; ci < p.in_channels_per_group; ++ci) {
    const long channel = first_in_channel + ci;
    const device T* input_channel = input_batch + channel * p.input_strides[1];
    const device T* weight_channel = Transposed
        ? weight + channel * p.weight_strides[0] + column * p.weight_strides[1]
        : weight + p.weight_offset + group * p.weight_group_stride + column * p.weight_strides[0] +
              ci * p.weight_strides[1];
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
// The weight tile's row pitch: a simdgroup's 32 lanes stage one column's 32 reduction steps,
// and a pitch of 33 puts them in 32 different threadgroup-memory banks.
constant constexpr uint kGemmWeightPitch = kGemmBlock + 1;

// Output pixel `pixel`, counted over the batch and the three output dimensions, as its image
// and output position.
struct OutputPixel {
  long n, od, oh, ow;
};
inline OutputPixel output_pixel(long pixel, constant ConvParams& p) {
  const long per_image = p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2];
  const long in_image = pixel % per_image;
  OutputPixel at;
  at.n = pixel / per_image;
  at.ow = in_image % p.output_sizes[2];
  at.oh = (in_image / p.output_sizes[2]) % p.output_sizes[1];
  at.od = in_image / (p.output_sizes[2] * p.output_sizes[1]);
  return at;
}

// One output pixel of a block: where its input window starts (the offset of tap (0, 0, 0) of
// channel 0, before padding is checked) and where its outputs go.
struct GemmPixel {
  long input;
  long output;
  int depth, height, width;  // the window's first input position, negative in the padding
  int valid;                 // inside the problem (the last block may be partial)
};

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
  threadgroup float* weight_tile = tiles + kGemmBlock * kGemmDepth;  // kGemmDepth x kGemmWeightPitch
  threadgroup GemmPixel block_pixels[kGemmBlock];

  const long pixels = p.batch * p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2];
  const uint taps = uint(p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2]);
  const uint plane_taps = uint(p.kernel_sizes[1] * p.kernel_sizes[2]);
  const long depth = p.in_channels_per_group * taps;
  const long group = group_position.z;
  const long pixel0 = long(group_position.y) * kGemmBlock;
  const long column0 = long(group_position.x) * kGemmBlock;
  const long first_in_channel = group * p.in_channels_per_group;
  const long first_out_channel = group * p.out_channels_per_group;

  // Each pixel's coordinates are worked out once here, not at every staging step.
  if (thread_index < kGemmBlock) {
    const long pixel = pixel0 + thread_index;
    GemmPixel info;
    info.valid = pixel < pixels;
    const OutputPixel at = output_pixel(pixel, p);
    info.depth = int(at.od * p.stride[0] - p.padding[0]);
    info.height = int(at.oh * p.stride[1] - p.padding[1]);
    info.width = int(at.ow * p.stride[2] - p.padding[2]);
    info.input = at.n * p.input_strides[0] + first_in_channel * p.input_strides[1] +
                 info.depth * p.input_strides[2] + info.height * p.input_strides[3] + info.width * p.input_strides[4];
    info.output = at.n * p.output_strides[0] + at.od * p.output_strides[2] + at.oh * p.output_strides[3] +
                  at.ow * p.output_strides[4];
    block_pixels[thread_index] = info;
  }

  const uint simd_row = (simdgroup / 2) * 16;
  const uint simd_column = (simdgroup % 2) * 16;
  simdgroup_float8x8 accumulators[2][2];
  for (uint i = 0; i < 2; ++i) {
    for (uint j = 0; j < 2; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  // A thread stages one reduction step r of the patch (for every fourth pixel) and of the
  // weight (for every fourth column): r's channel and taps are decomposed once per step.
  const uint step = thread_index % kGemmDepth;
  const uint first_row = thread_index / kGemmDepth;
  constexpr uint kRowsPerThread = kGemmBlock * kGemmDepth / kGemmThreads;
  constexpr uint kRowStride = kGemmThreads / kGemmDepth;
  for (long k0 = 0; k0 < depth; k0 += kGemmDepth) {
    const long r = k0 + step;
    const bool inside = r < depth;
    const uint ci = inside ? uint(r / taps) : 0;
    const uint tap = inside ? uint(r - long(ci) * taps) : 0;
    const uint kd = tap / plane_taps;
    const uint kh = (tap - kd * plane_taps) / uint(p.kernel_sizes[2]);
    const uint kw = tap - kd * plane_taps - kh * uint(p.kernel_sizes[2]);
    const int dd = int(kd * p.dilation[0]), dh = int(kh * p.dilation[1]), dw = int(kw * p.dilation[2]);
    const long input_tap = ci * p.input_strides[1] + dd * p.input_strides[2] + dh * p.input_strides[3] +
                           dw * p.input_strides[4];
    const long weight_tap = p.weight_offset + group * p.weight_group_stride + ci * p.weight_strides[1] +
                            kd * p.weight_strides[2] + kh * p.weight_strides[3] + kw * p.weight_strides[4];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j < kRowsPerThread; ++j) {
      const uint row = first_row + j * kRowStride;
      const GemmPixel info = block_pixels[row];
      const int id = info.depth + dd, ih = info.height + dh, iw = info.width + dw;
      float value = 0.0f;
      if (inside && info.valid && id >= 0 && id < p.input_sizes[0] && ih >= 0 && ih < p.input_sizes[1] &&
          iw >= 0 && iw < p.input_sizes[2]) {
        value = float(input[info.input + input_tap]);
      }
      patch_tile[row * kGemmDepth + step] = value;
    }
    for (uint j = 0; j < kRowsPerThread; ++j) {
      const uint column = first_row + j * kRowStride;
      const bool present = inside && column0 + column < p.out_channels_per_group;
      weight_tile[step * kGemmWeightPitch + column] =
          present ? float(weight[weight_tap + (column0 + column) * p.weight_strides[0]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint kk = 0; kk < kGemmDepth; kk += 8) {
      simdgroup_float8x8 patch_fragments[2];
      simdgroup_float8x8 weight_fragments[2];
      for (uint i = 0; i < 2; ++i) {
        simdgroup_load(patch_fragments[i], patch_tile, kGemmDepth, ulong2(kk, simd_row + 8 * i));
        simdgroup_load(weight_fragments[i], weight_tile, kGemmWeightPitch, ulong2(simd_column + 8 * i, kk));
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
  const long column = column0 + step;
  if (column >= p.out_channels_per_group) return;
  const long co = first_out_channel + column;
  const float bias_value = p.has_bias ? float(bias[co * p.bias_stride]) : 0.0f;
  for (uint j = 0; j < kRowsPerThread; ++j) {
    const uint row = first_row + j * kRowStride;
    const GemmPixel info = block_pixels[row];
    if (!info.valid) continue;
    output[info.output + co * p.output_strides[1]] = T(results[row * kGemmBlock + step] + bias_value);
  }
}

// The patch matrix of a problem with few output pixels, for a product with the weight on the
// matrix-product kernels: patches[group][pixel][r] is the input under reduction step r of output
// pixel `pixel` (zero in the padding), r counted in the order the weight's dense per-channel
// block lies in memory (axes of size 1 aside, largest stride first), so that block is one
// contiguous row of the product's other operand whatever the weight's layout. A thread takes
// one step r for every pixel: r's channel and taps are worked out once, and the pixels are
// walked in order instead of divided out (divisions were most of this kernel's work).
template <typename T>
kernel void convolution_patches(device T* patches [[buffer(0)]],
                                const device T* input [[buffer(1)]],
                                constant ConvParams& p [[buffer(2)]],
                                uint3 position [[thread_position_in_grid]]) {
  const long depth = p.in_channels_per_group * p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2];
  const long pixels = p.batch * p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2];
  const long r = position.x, group = position.z;
  if (r >= depth) return;

  const long sizes[4] = {p.in_channels_per_group, p.kernel_sizes[0], p.kernel_sizes[1], p.kernel_sizes[2]};
  long index[4] = {0, 0, 0, 0};
  long rest = r;
  uint taken = 0;
  for (uint pass = 0; pass < 4; ++pass) {
    int axis = -1;
    for (int a = 0; a < 4; ++a) {
      if (sizes[a] > 1 && !(taken & (1u << a)) && (axis < 0 || p.weight_strides[1 + a] > p.weight_strides[1 + axis]))
        axis = a;
    }
    if (axis < 0) break;
    taken |= 1u << axis;
    index[axis] = rest / p.weight_strides[1 + axis];
    rest -= index[axis] * p.weight_strides[1 + axis];
  }

  const device T* channel = input + (group * p.in_channels_per_group + index[0]) * p.input_strides[1];
  device T* out = patches + group * pixels * depth + r;
  OutputPixel at = {0, 0, 0, 0};
  for (long pixel = 0; pixel < pixels; ++pixel) {
    const long id = at.od * p.stride[0] - p.padding[0] + index[1] * p.dilation[0];
    const long ih = at.oh * p.stride[1] - p.padding[1] + index[2] * p.dilation[1];
    const long iw = at.ow * p.stride[2] - p.padding[2] + index[3] * p.dilation[2];
    T value = T(0);
    if (id >= 0 && id < p.input_sizes[0] && ih >= 0 && ih < p.input_sizes[1] && iw >= 0 && iw < p.input_sizes[2]) {
      value = channel[at.n * p.input_strides[0] + id * p.input_strides[2] + ih * p.input_strides[3] +
                      iw * p.input_strides[4]];
    }
    out[pixel * depth] = value;
    if (++at.ow < p.output_sizes[2]) continue;
    at.ow = 0;
    if (++at.oh < p.output_sizes[1]) continue;
    at.oh = 0;
    if (++at.od < p.output_sizes[0]) continue;
    at.od = 0;
    ++at.n;
  }
}

// Forward convolution as an implicit GEMM over a 2-D tile of output pixels, for 2-D and 3-D
// problems whose input window fits in threadgroup memory. A threadgroup computes a
// kTiledRows x (8 * ColumnFragments) block of output pixels (one image n, one output depth od)
// for 8 * ChannelFragments output channels of one group. Per chunk of kTiledChunk input channels
// and kernel depth tap kd it stages the input window the block reads (the "halo": the block's
// rows and columns widened by the kernel's reach) once, channels innermost, so a tap
// (kh, kw) of eight neighbouring output pixels is an 8 x 8 simdgroup matrix at a fixed stride
// in that window: each input value is read from device memory once per chunk instead of once
// per tap, and each weight once per pixel block instead of once per 32 pixels.
// Eight simdgroups, each two output rows of the block. The CPU device's launch shape runs the
// same blocks as convolution_strips.
constant constexpr uint kTiledRows = 16;
constant constexpr uint kTiledChunk = 8;
constant constexpr uint kTiledThreads = 256;

// Stages the input window of one chunk of input channels and one kernel depth tap, [row][column]
// [channel] with the channels innermost, zero in the padding and past the chunk's channels.
// Thread `thread_index` of `threads` takes every threads-th window position, every channel of the
// chunk at each: one division per position instead of three per element.
template <typename T>
inline void stage_window(threadgroup float* window, const device T* input, constant ConvParams& p, long plane_base,
                         bool plane_inside, long first_ih, long first_iw, long window_columns, uint chunk_channels,
                         uint thread_index, uint threads) {
  const long window_rows = (kTiledRows - 1) * p.stride[1] + (p.kernel_sizes[1] - 1) * p.dilation[1] + 1;
  for (long position = thread_index; position < window_rows * window_columns; position += threads) {
    const long row = position / window_columns;
    const long column = position - row * window_columns;
    const long ih = first_ih + row;
    const long iw = first_iw + column;
    const bool inside = plane_inside && ih >= 0 && ih < p.input_sizes[1] && iw >= 0 && iw < p.input_sizes[2];
    const long offset = plane_base + ih * p.input_strides[3] + iw * p.input_strides[4];
    threadgroup float* target = window + position * kTiledChunk;
    if (inside && chunk_channels == kTiledChunk) {
      // A whole chunk: a loop of constant length, unrolled.
      for (uint c = 0; c < kTiledChunk; ++c) target[c] = float(input[offset + c * p.input_strides[1]]);
      continue;
    }
    const uint loaded = inside ? chunk_channels : 0;
    for (uint c = 0; c < loaded; ++c) target[c] = float(input[offset + c * p.input_strides[1]]);
    for (uint c = loaded; c < kTiledChunk; ++c) target[c] = 0.0f;
  }
}

// target[i] = float(source[i * stride]) for i < count. Contiguous sources go eight values at a time,
// a block's loads before its stores: vector copies, with no test whether target and source overlap.
template <typename T>
inline void stage_run(threadgroup float* target, const device T* source, long count, long stride) {
  if (stride != 1) {
    for (long i = 0; i < count; ++i) target[i] = float(source[i * stride]);
    return;
  }
  long i = 0;
  for (; i + 8 <= count; i += 8) {
    float block[8];
#pragma GCC unroll 8
    for (uint k = 0; k < 8; ++k) block[k] = float(source[i + k]);
#pragma GCC unroll 8
    for (uint k = 0; k < 8; ++k) target[i + k] = block[k];
  }
  for (; i < count; ++i) target[i] = float(source[i]);
}

// convolution_strips' staging of the same window, [channel][row][column]: a thread stages whole
// rows, a run of columns per channel, with no division per position. Zero in the padding;
// channels past the chunk's stay unstaged, as accumulate_strip reads only the chunk's channels.
template <typename T>
inline void stage_window_planes(threadgroup float* window, const device T* input, constant ConvParams& p,
                                long plane_base, bool plane_inside, long first_ih, long first_iw, long window_rows,
                                long window_columns, uint chunk_channels, uint thread_index, uint threads) {
  // The window's columns inside the input, the same for every row; the others are padding.
  const long inside_begin = min(max(-first_iw, 0L), window_columns);
  const long inside_end = max(min(p.input_sizes[2] - first_iw, window_columns), inside_begin);
  const long window_plane = window_rows * window_columns;
  for (long row = thread_index; row < window_rows; row += threads) {
    const long ih = first_ih + row;
    const bool row_inside = plane_inside && ih >= 0 && ih < p.input_sizes[1];
    const long begin = row_inside ? inside_begin : window_columns;
    const long end = row_inside ? inside_end : window_columns;
    long offset = plane_base + ih * p.input_strides[3] + (first_iw + begin) * p.input_strides[4];
    threadgroup float* target = window + row * window_columns;
    for (uint c = 0; c < chunk_channels; ++c, offset += p.input_strides[1], target += window_plane) {
      for (long column = 0; column < begin; ++column) target[column] = 0.0f;
      if (end > begin) stage_run(target + begin, input + offset, end - begin, p.input_strides[4]);
      for (long column = end; column < window_columns; ++column) target[column] = 0.0f;
    }
  }
}

template <typename T, uint ColumnFragments, uint ChannelFragments>
kernel void convolution_tiled(device T* output [[buffer(0)]],
                              const device T* input [[buffer(1)]],
                              const device T* weight [[buffer(2)]],
                              const device T* bias [[buffer(3)]],
                              constant ConvParams& p [[buffer(4)]],
                              threadgroup float* tiles [[threadgroup(0)]],
                              uint3 group_position [[threadgroup_position_in_grid]],
                              uint thread_index [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  constexpr uint kColumns = 8 * ColumnFragments;
  constexpr uint kChannels = 8 * ChannelFragments;
  const long groups = p.out_channels / p.out_channels_per_group;
  const long blocks_across = (p.output_sizes[2] + kColumns - 1) / kColumns;
  const long oh0 = long(group_position.x / blocks_across) * kTiledRows;
  const long ow0 = long(group_position.x % blocks_across) * kColumns;
  const long column0 = long(group_position.y) * kChannels;
  const long group = group_position.z % groups;
  const long od = (group_position.z / groups) % p.output_sizes[0];
  const long n = group_position.z / (groups * p.output_sizes[0]);
  const long first_in_channel = group * p.in_channels_per_group;
  const long first_out_channel = group * p.out_channels_per_group;

  // Rows and columns of input the block reads for one kernel depth tap.
  const long window_rows = (kTiledRows - 1) * p.stride[1] + (p.kernel_sizes[1] - 1) * p.dilation[1] + 1;
  const long window_columns = (kColumns - 1) * p.stride[2] + (p.kernel_sizes[2] - 1) * p.dilation[2] + 1;
  const long window_size = window_rows * window_columns * kTiledChunk;
  const long row_weights = p.kernel_sizes[2] * kTiledChunk * kChannels;
  // The window [row][column][channel], then one kernel row's weights [kw][channel][out channel].
  threadgroup float* window = tiles;
  threadgroup float* weight_tile = tiles + window_size;

  // Declared once, outside the loops: on the CPU device each declaration of a simdgroup
  // matrix is a pass over the group's threads.
  simdgroup_float8x8 accumulators[2][ColumnFragments][ChannelFragments];
  simdgroup_float8x8 weight_fragments[ChannelFragments];
  simdgroup_float8x8 pixels;
  for (uint i = 0; i < 2; ++i) {
    for (uint f = 0; f < ColumnFragments; ++f) {
      for (uint j = 0; j < ChannelFragments; ++j) {
        accumulators[i][f][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      }
    }
  }

  // Index math shared by the whole block, out of the per-element loops: the block's first
  // input row and column, the offsets of its image and input channel group, its first
  // output channel's weights, and how many of its output channels the group has.
  const long first_ih = oh0 * p.stride[1] - p.padding[1];
  const long first_iw = ow0 * p.stride[2] - p.padding[2];
  const long input_base = n * p.input_strides[0] + first_in_channel * p.input_strides[1];
  const long weight_base = p.weight_offset + group * p.weight_group_stride + column0 * p.weight_strides[0];
  const long block_channels = p.out_channels_per_group - column0;

  for (long c0 = 0; c0 < p.in_channels_per_group; c0 += kTiledChunk) {
    const long channels_left = p.in_channels_per_group - c0;
    const uint chunk_channels = channels_left < kTiledChunk ? uint(channels_left) : kTiledChunk;
    for (long kd = 0; kd < p.kernel_sizes[0]; ++kd) {
      const long id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
      const bool plane_inside = id >= 0 && id < p.input_sizes[0];
      const long plane_base = input_base + c0 * p.input_strides[1] + id * p.input_strides[2];
      threadgroup_barrier(mem_flags::mem_threadgroup);
      stage_window(window, input, p, plane_base, plane_inside, first_ih, first_iw, window_columns, chunk_channels,
                   thread_index, kTiledThreads);
      for (long kh = 0; kh < p.kernel_sizes[1]; ++kh) {
        const long row_base = weight_base + c0 * p.weight_strides[1] + kd * p.weight_strides[2] + kh * p.weight_strides[3];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = thread_index; i < row_weights; i += kTiledThreads) {
          const uint out = i % kChannels;
          const uint c = (i / kChannels) % kTiledChunk;
          const uint kw = i / (kChannels * kTiledChunk);
          float value = 0.0f;
          if (plane_inside && c < chunk_channels && out < block_channels) {
            value = float(weight[row_base + out * p.weight_strides[0] + c * p.weight_strides[1] +
                                 kw * p.weight_strides[4]]);
          }
          weight_tile[i] = value;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        for (long kw = 0; kw < p.kernel_sizes[2]; ++kw) {
          for (uint j = 0; j < ChannelFragments; ++j) {
            simdgroup_load(weight_fragments[j], weight_tile + kw * kTiledChunk * kChannels, kChannels,
                           ulong2(8 * j, 0));
          }
          for (uint i = 0; i < 2; ++i) {
            for (uint f = 0; f < ColumnFragments; ++f) {
              // The window row and column of the fragment's first pixel under tap (kh, kw),
              // computed in the load's argument: once per simdgroup on the CPU device, where a
              // per-thread variable would be computed and kept for every thread.
              const long column = 8 * f * p.stride[2] + kw * p.dilation[2];
              simdgroup_load(pixels,
                             window + (((2 * simdgroup + i) * p.stride[1] + kh * p.dilation[1]) * window_columns +
                                       column) * kTiledChunk,
                             p.stride[2] * kTiledChunk, ulong2(0, 0));
              for (uint j = 0; j < ChannelFragments; ++j) {
                simdgroup_multiply_accumulate(accumulators[i][f][j], pixels, weight_fragments[j],
                                              accumulators[i][f][j]);
              }
            }
          }
        }
      }
    }
  }

  // The results, bias added last.
  const long output_base = n * p.output_strides[0] + (first_out_channel + column0) * p.output_strides[1] +
                           od * p.output_strides[2];
  const long bias_base = (first_out_channel + column0) * p.bias_stride;
  // Each simdgroup writes its fragments through its own 8 x 8 scratch in threadgroup memory.
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup float* scratch = tiles + 64 * simdgroup;
  for (uint i = 0; i < 2; ++i) {
    for (uint f = 0; f < ColumnFragments; ++f) {
      for (uint j = 0; j < ChannelFragments; ++j) {
        simdgroup_store(accumulators[i][f][j], scratch, 8, ulong2(0, 0));
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = lane; e < 64; e += 32) {
          const long oh = oh0 + 2 * simdgroup + i;
          const long ow = ow0 + 8 * f + e % 8;
          const uint column = 8 * j + e / 8;  // of the block
          if (oh < p.output_sizes[1] && ow < p.output_sizes[2] && column < block_channels) {
            float sum = scratch[(e % 8) * 8 + e / 8];
            if (p.has_bias) sum += float(bias[bias_base + column * p.bias_stride]);
            output[output_base + column * p.output_strides[1] + oh * p.output_strides[3] +
                   ow * p.output_strides[4]] = T(sum);
          }
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
      }
    }
  }
}

// The CPU device's shape of the pixel-block implicit GEMM (launch_shape() == cpu): the blocks,
// staged input window (by channel planes: stage_window_planes) and staged kernel rows of
// convolution_tiled, but a thread computes a strip of kStripPixels consecutive output pixels of one
// row for kStripChannels output channels with its sums in registers: per tap and input channel, one
// row of kStripChannels weights times each of the strip's input values, the outer-product form of a
// CPU matrix-multiply micro-kernel (as matmul_panels; with AVX-512 a strip's sums are eight 16-wide
// registers). A simdgroup matrix product on the CPU device loads and stores its accumulator and
// broadcasts every element of its left operand for 8 x 8 x 8 products. Each output sums its
// products in convolution_tiled's order (channel chunk, kd, kh, kw, channel), so both shapes give
// the same bits. Between kernel rows a strip's sums wait in the thread's array. kThreads (the
// host's threadgroup size) is one thread per strip of the block.
constant constexpr uint kStripPixels = 8;
constant constexpr uint kStripChannels = 16;

// strip[px][channel] += window_row[px * pixel_step + kw * tap_step + c * channel_step] *
//   weights[(kw * kTiledChunk + c) * weight_pitch + channel], over the kernel row's taps kw and the
// chunk's first `channels` channels c in that order (past them nothing is staged; convolution_tiled
// adds their products, +0, which change no sum but the sign of a -0 one). The sums are copied into
// a local array, the loops over the strip unrolled whole, and the loop over channels has a bound
// g++ cannot see (with a constant one it vectorised across channels instead, gathering the strip's
// values), so the sums stay in vector registers; it ends at a pointer, not a count, which spares a
// register. Never inlined: inside the CPU device's region function (whose options include the cheap
// vectoriser cost model) g++ vectorised it differently and spilled the sums, 3x slower in
// unet_like; it used to stay out of line only because the region function's stack frame happened to
// be near g++'s growth limit.
__attribute__((noinline)) void accumulate_strip(thread float* strip, const threadgroup float* window_row, long pixel_step,
                             long tap_step, long channel_step, const threadgroup float* weights, long weight_pitch,
                             long taps, uint channels) {
  float sums[kStripPixels][kStripChannels];
#pragma GCC unroll 8
  for (uint px = 0; px < kStripPixels; ++px) {
#pragma GCC unroll 16
    for (uint channel = 0; channel < kStripChannels; ++channel) sums[px][channel] = strip[px * kStripChannels + channel];
  }
  for (long kw = 0; kw < taps; ++kw) {
    const threadgroup float* values = window_row + kw * tap_step;
    const threadgroup float* weight_row = weights + kw * long(kTiledChunk) * weight_pitch;
    const threadgroup float* const weight_rows_end = weight_row + channels * weight_pitch;
    for (; weight_row != weight_rows_end; values += channel_step, weight_row += weight_pitch) {
#pragma GCC unroll 8
      for (uint px = 0; px < kStripPixels; ++px) {
        const float x = values[px * pixel_step];
#pragma GCC unroll 16
        for (uint channel = 0; channel < kStripChannels; ++channel) sums[px][channel] += x * weight_row[channel];
      }
    }
  }
#pragma GCC unroll 8
  for (uint px = 0; px < kStripPixels; ++px) {
#pragma GCC unroll 16
    for (uint channel = 0; channel < kStripChannels; ++channel) strip[px * kStripChannels + channel] = sums[px][channel];
  }
}

// target[i] = float(source[i * stride]) for i < filled, zero up to Count; a whole run unrolled.
template <typename T, uint Count>
inline void stage_weight_run(threadgroup float* target, const device T* source, uint filled, long stride) {
  if (filled == Count) {
#pragma GCC unroll 64
    for (uint i = 0; i < Count; ++i) target[i] = float(source[i * stride]);
    return;
  }
  for (uint i = 0; i < filled; ++i) target[i] = float(source[i * stride]);
  for (uint i = filled; i < Count; ++i) target[i] = 0.0f;
}

// One output channel of a strip: out[px * pixel_stride] = T(sums[px * kStripChannels] + bias) for
// its first `pixels` pixels; a whole strip of contiguous outputs unrolled (and vectorised).
template <typename T>
inline void write_strip_channel(device T* out, const thread float* sums, float bias, uint pixels, long pixel_stride) {
  if (pixels == kStripPixels && pixel_stride == 1) {
#pragma GCC unroll 8
    for (uint px = 0; px < kStripPixels; ++px) out[px] = T(sums[px * kStripChannels] + bias);
    return;
  }
  for (uint px = 0; px < pixels; ++px) out[px * pixel_stride] = T(sums[px * kStripChannels] + bias);
}

template <typename T, uint ColumnFragments, uint ChannelFragments>
kernel void convolution_strips(device T* output [[buffer(0)]],
                               const device T* input [[buffer(1)]],
                               const device T* weight [[buffer(2)]],
                               const device T* bias [[buffer(3)]],
                               constant ConvParams& p [[buffer(4)]],
                               threadgroup float* tiles [[threadgroup(0)]],
                               uint3 group_position [[threadgroup_position_in_grid]],
                               uint thread_index [[thread_index_in_threadgroup]]) {
  constexpr uint kColumns = 8 * ColumnFragments;
  constexpr uint kChannels = 8 * ChannelFragments;
  constexpr uint kThreads = kTiledRows * ColumnFragments * (kChannels / kStripChannels);
  const long groups = p.out_channels / p.out_channels_per_group;
  const long blocks_across = (p.output_sizes[2] + kColumns - 1) / kColumns;
  const long oh0 = long(group_position.x / blocks_across) * kTiledRows;
  const long ow0 = long(group_position.x % blocks_across) * kColumns;
  const long column0 = long(group_position.y) * kChannels;
  const long group = group_position.z % groups;
  const long od = (group_position.z / groups) % p.output_sizes[0];
  const long n = group_position.z / (groups * p.output_sizes[0]);
  const long window_rows = (kTiledRows - 1) * p.stride[1] + (p.kernel_sizes[1] - 1) * p.dilation[1] + 1;
  const long window_columns = (kColumns - 1) * p.stride[2] + (p.kernel_sizes[2] - 1) * p.dilation[2] + 1;
  const uint row_pairs = uint(p.kernel_sizes[2]) * kTiledChunk;  // (kw, channel) pairs of a kernel row
  const long window_plane = window_rows * window_columns;
  // The window [channel][row][column], then one kernel row's weights [kw][channel][out channel].
  threadgroup float* window = tiles;
  threadgroup float* weight_tile = tiles + window_plane * kTiledChunk;

  // The thread's strip: its row, first column and first output channel in the block.
  const uint strip_row = thread_index % kTiledRows;
  const uint strip_column = kStripPixels * ((thread_index / kTiledRows) % ColumnFragments);
  const uint strip_channel = kStripChannels * (thread_index / (kTiledRows * ColumnFragments));
  float strip[kStripPixels * kStripChannels];
  for (uint i = 0; i < kStripPixels * kStripChannels; ++i) strip[i] = 0.0f;

  const long first_ih = oh0 * p.stride[1] - p.padding[1];
  const long first_iw = ow0 * p.stride[2] - p.padding[2];
  const long input_base = n * p.input_strides[0] + group * p.in_channels_per_group * p.input_strides[1];
  const long weight_base = p.weight_offset + group * p.weight_group_stride + column0 * p.weight_strides[0];
  const long block_channels = p.out_channels_per_group - column0;
  const uint weight_runs = block_channels < kChannels ? uint(block_channels) : kChannels;

  for (long c0 = 0; c0 < p.in_channels_per_group; c0 += kTiledChunk) {
    const long channels_left = p.in_channels_per_group - c0;
    const uint chunk_channels = channels_left < kTiledChunk ? uint(channels_left) : kTiledChunk;
    for (long kd = 0; kd < p.kernel_sizes[0]; ++kd) {
      const long id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
      const bool plane_inside = id >= 0 && id < p.input_sizes[0];
      const long plane_base = input_base + c0 * p.input_strides[1] + id * p.input_strides[2];
      threadgroup_barrier(mem_flags::mem_threadgroup);
      stage_window_planes(window, input, p, plane_base, plane_inside, first_ih, first_iw, window_rows, window_columns,
                          chunk_channels, thread_index, kThreads);
      for (long kh = 0; kh < p.kernel_sizes[1]; ++kh) {
        const long row_base = weight_base + c0 * p.weight_strides[1] + kd * p.weight_strides[2] + kh * p.weight_strides[3];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // A thread stages one (kw, channel) pair's output channels: a run of the tile. Channels past
        // the chunk's stay unstaged, as in the window.
        for (uint pair = thread_index; pair < row_pairs; pair += kThreads) {
          const uint c = pair % kTiledChunk;
          if (c >= chunk_channels) continue;
          const uint kw = pair / kTiledChunk;
          const long offset = row_base + c * p.weight_strides[1] + kw * p.weight_strides[4];
          stage_weight_run<T, kChannels>(weight_tile + pair * kChannels, weight + offset, plane_inside ? weight_runs : 0,
                                         p.weight_strides[0]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        accumulate_strip(strip,
                         window + (strip_row * p.stride[1] + kh * p.dilation[1]) * window_columns +
                             strip_column * p.stride[2],
                         p.stride[2], p.dilation[2], window_plane, weight_tile + strip_channel, kChannels,
                         p.kernel_sizes[2], chunk_channels);
      }
    }
  }

  // The strip's results, bias added last, one output channel's run of pixels at a time. Without a
  // bias -0 is added, which changes no value's bits (x + -0 is x, a zero's sign included).
  const long oh = oh0 + strip_row;
  const long ow = ow0 + strip_column;
  const long pixels_left = p.output_sizes[2] - ow;
  const long channels_left = block_channels - strip_channel;
  if (oh >= p.output_sizes[1] || pixels_left <= 0 || channels_left <= 0) return;
  const uint pixels = pixels_left < kStripPixels ? uint(pixels_left) : kStripPixels;
  const uint channels = channels_left < kStripChannels ? uint(channels_left) : kStripChannels;
  const long first_channel = group * p.out_channels_per_group + column0 + strip_channel;
  device T* target = output + n * p.output_strides[0] + first_channel * p.output_strides[1] + od * p.output_strides[2] +
                     oh * p.output_strides[3] + ow * p.output_strides[4];
  for (uint channel = 0; channel < channels; ++channel) {
    const float channel_bias = p.has_bias ? float(bias[(first_channel + channel) * p.bias_stride]) : -0.0f;
    write_strip_channel(target + channel * p.output_strides[1], strip + channel, channel_bias, pixels,
                        p.output_strides[4]);
  }
}

// Depthwise forward convolution (one input channel per group): a threadgroup computes a
// kDepthwiseRows x kDepthwiseColumns block of one output channel's pixels, one per thread,
// from that channel's input window and kernel staged once in threadgroup memory.
constant constexpr uint kDepthwiseRows = 8;
constant constexpr uint kDepthwiseColumns = 32;

template <typename T>
kernel void convolution_depthwise(device T* output [[buffer(0)]],
                                  const device T* input [[buffer(1)]],
                                  const device T* weight [[buffer(2)]],
                                  const device T* bias [[buffer(3)]],
                                  constant ConvParams& p [[buffer(4)]],
                                  threadgroup float* tiles [[threadgroup(0)]],
                                  uint3 group_position [[threadgroup_position_in_grid]],
                                  uint3 local [[thread_position_in_threadgroup]],
                                  uint thread_index [[thread_index_in_threadgroup]]) {
  const long blocks_across = (p.output_sizes[2] + kDepthwiseColumns - 1) / kDepthwiseColumns;
  const long oh0 = long(group_position.x / blocks_across) * kDepthwiseRows;
  const long ow0 = long(group_position.x % blocks_across) * kDepthwiseColumns;
  const long co = group_position.z % p.out_channels;
  const long od = (group_position.z / p.out_channels) % p.output_sizes[0];
  const long n = group_position.z / (p.out_channels * p.output_sizes[0]);
  const long channel = co / p.out_channels_per_group;
  const long taps = p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2];
  const long window_rows = (kDepthwiseRows - 1) * p.stride[1] + (p.kernel_sizes[1] - 1) * p.dilation[1] + 1;
  const long window_columns =
      (kDepthwiseColumns - 1) * p.stride[2] + (p.kernel_sizes[2] - 1) * p.dilation[2] + 1;
  threadgroup float* kernel_taps = tiles;   // [kd][kh][kw]
  threadgroup float* window = tiles + taps;  // [row][column]
  const device T* input_channel = input + n * p.input_strides[0] + channel * p.input_strides[1];

  for (long i = thread_index; i < taps; i += kDepthwiseRows * kDepthwiseColumns) {
    const long kw = i % p.kernel_sizes[2];
    const long kh = (i / p.kernel_sizes[2]) % p.kernel_sizes[1];
    const long kd = i / (p.kernel_sizes[2] * p.kernel_sizes[1]);
    kernel_taps[i] = float(weight[p.weight_offset + channel * p.weight_group_stride +
                                  (co - channel * p.out_channels_per_group) * p.weight_strides[0] +
                                  kd * p.weight_strides[2] + kh * p.weight_strides[3] + kw * p.weight_strides[4]]);
  }
  float sum = 0.0f;
  for (long kd = 0; kd < p.kernel_sizes[0]; ++kd) {
    const long id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
    const bool plane_inside = id >= 0 && id < p.input_sizes[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long i = thread_index; i < window_rows * window_columns; i += kDepthwiseRows * kDepthwiseColumns) {
      const long ih = oh0 * p.stride[1] - p.padding[1] + i / window_columns;
      const long iw = ow0 * p.stride[2] - p.padding[2] + i % window_columns;
      window[i] = plane_inside && ih >= 0 && ih < p.input_sizes[1] && iw >= 0 && iw < p.input_sizes[2]
                      ? float(input_channel[id * p.input_strides[2] + ih * p.input_strides[3] +
                                            iw * p.input_strides[4]])
                      : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long kh = 0; kh < p.kernel_sizes[1]; ++kh) {
      const long row = long(local.y) * p.stride[1] + kh * p.dilation[1];
      for (long kw = 0; kw < p.kernel_sizes[2]; ++kw) {
        const long column = long(local.x) * p.stride[2] + kw * p.dilation[2];
        sum += window[row * window_columns + column] * kernel_taps[(kd * p.kernel_sizes[1] + kh) * p.kernel_sizes[2] + kw];
      }
    }
  }
  const long oh = oh0 + local.y, ow = ow0 + local.x;
  if (oh >= p.output_sizes[1] || ow >= p.output_sizes[2]) return;
  if (p.has_bias) sum += float(bias[co * p.bias_stride]);
  output[n * p.output_strides[0] + co * p.output_strides[1] + od * p.output_strides[2] + oh * p.output_strides[3] +
         ow * p.output_strides[4]] = T(sum);
}

// Transposed convolution whose kernel equals its stride, without padding, dilation or output
// padding: every output pixel receives exactly one tap of one input pixel, so per group g the
// problem is one GEMM
//   out[(n, i * stride + k), co] = sum over ci of input[(n, i), ci] * weight[ci, (co, k)]
// with rows the input pixels (n, id, ih, iw), columns the (output channel, tap) pairs
// (co, kd, kh, kw) and the product scattered to the output phase of its tap. A threadgroup of
// eight simdgroups (4 x 2, each 32 x 64) computes a 128 x 128 block, staging 16-deep reduction
// steps as float; each row's and column's offsets into input, weight and output are computed
// once per threadgroup. Function constants, as MLX's GEMM specialises, drop the edge checks a
// shape makes needless: aligned_blocks when rows and columns are multiples of the block,
// aligned_depth when the input channels per group are a multiple of the step.
constant bool aligned_blocks [[function_constant(0)]];
constant bool aligned_depth [[function_constant(1)]];

constant constexpr uint kPhaseBlock = 128;
constant constexpr uint kPhaseDepth = 16;
constant constexpr uint kPhaseThreads = 256;

template <typename T>
kernel void convolution_transposed_gemm(device T* output [[buffer(0)]],
                                        const device T* input [[buffer(1)]],
                                        const device T* weight [[buffer(2)]],
                                        const device T* bias [[buffer(3)]],
                                        constant ConvParams& p [[buffer(4)]],
                                        uint3 group_position [[threadgroup_position_in_grid]],
                                        uint thread_index [[thread_index_in_threadgroup]],
                                        uint simdgroup [[simdgroup_index_in_threadgroup]],
                                        uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float a_tile[kPhaseBlock * kPhaseDepth];  // [row][ci]; the epilogue's scratch after
  threadgroup float b_tile[kPhaseDepth * kPhaseBlock];  // [ci][column]
  threadgroup long row_input[kPhaseBlock];
  threadgroup long row_output[kPhaseBlock];
  threadgroup long column_weight[kPhaseBlock];
  threadgroup long column_output[kPhaseBlock];
  threadgroup float column_bias[kPhaseBlock];

  const long image = p.input_sizes[0] * p.input_sizes[1] * p.input_sizes[2];
  const long rows = p.batch * image;
  const long taps = p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2];
  const long columns = p.out_channels_per_group * taps;
  const long depth = p.in_channels_per_group;
  const long group = group_position.z;
  const long row0 = long(group_position.y) * kPhaseBlock;
  const long column0 = long(group_position.x) * kPhaseBlock;
  const device T* group_input = input + group * p.in_channels_per_group * p.input_strides[1];
  const device T* group_weight = weight + group * p.weight_group_stride;

  if (thread_index < kPhaseBlock) {
    const long row = min(row0 + thread_index, rows - 1);  // rows past the end repeat the last
    const long iw = row % p.input_sizes[2];
    const long ih = (row / p.input_sizes[2]) % p.input_sizes[1];
    const long id = (row / (p.input_sizes[2] * p.input_sizes[1])) % p.input_sizes[0];
    const long n = row / image;
    row_input[thread_index] = n * p.input_strides[0] + id * p.input_strides[2] + ih * p.input_strides[3] +
                              iw * p.input_strides[4];
    row_output[thread_index] = n * p.output_strides[0] + id * p.stride[0] * p.output_strides[2] +
                               ih * p.stride[1] * p.output_strides[3] + iw * p.stride[2] * p.output_strides[4];
  } else {
    const uint local = thread_index - kPhaseBlock;
    const long column = min(column0 + local, columns - 1);
    const long kw = column % p.kernel_sizes[2];
    const long kh = (column / p.kernel_sizes[2]) % p.kernel_sizes[1];
    const long kd = (column / (p.kernel_sizes[2] * p.kernel_sizes[1])) % p.kernel_sizes[0];
    const long co = group * p.out_channels_per_group + column / taps;
    column_weight[local] = (column / taps) * p.weight_strides[1] + kd * p.weight_strides[2] +
                           kh * p.weight_strides[3] + kw * p.weight_strides[4];
    column_output[local] =
        co * p.output_strides[1] + kd * p.output_strides[2] + kh * p.output_strides[3] + kw * p.output_strides[4];
    if (p.has_bias) column_bias[local] = float(bias[co * p.bias_stride]);
  }

  const uint simd_row = (simdgroup / 2) * 32;
  const uint simd_column = (simdgroup % 2) * 64;
  simdgroup_float8x8 accumulators[4][8];
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 8; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  for (long k0 = 0; k0 < depth; k0 += kPhaseDepth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Neighbouring threads take neighbouring rows: the pixels of one channel, contiguous in
    // channels-first layouts.
    for (uint i = thread_index; i < kPhaseBlock * kPhaseDepth; i += kPhaseThreads) {
      const uint row = i % kPhaseBlock, k = i / kPhaseBlock;
      const bool inside = (aligned_blocks || row0 + row < rows) && (aligned_depth || k0 + k < depth);
      a_tile[row * kPhaseDepth + k] = inside ? float(group_input[row_input[row] + (k0 + k) * p.input_strides[1]]) : 0.0f;
    }
    for (uint i = thread_index; i < kPhaseDepth * kPhaseBlock; i += kPhaseThreads) {
      const uint column = i % kPhaseBlock, k = i / kPhaseBlock;
      const bool inside = (aligned_blocks || column0 + column < columns) && (aligned_depth || k0 + k < depth);
      b_tile[i] = inside ? float(group_weight[column_weight[column] + (k0 + k) * p.weight_strides[0]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint kk = 0; kk < kPhaseDepth; kk += 8) {
      simdgroup_float8x8 a_fragments[4];
      simdgroup_float8x8 b_fragments[8];
      for (uint i = 0; i < 4; ++i) simdgroup_load(a_fragments[i], a_tile, kPhaseDepth, ulong2(kk, simd_row + 8 * i));
      for (uint j = 0; j < 8; ++j) simdgroup_load(b_fragments[j], b_tile, kPhaseBlock, ulong2(simd_column + 8 * j, kk));
      for (uint i = 0; i < 4; ++i) {
        for (uint j = 0; j < 8; ++j) {
          simdgroup_multiply_accumulate(accumulators[i][j], a_fragments[i], b_fragments[j], accumulators[i][j]);
        }
      }
    }
  }

  // Each simdgroup scatters its fragments through its own 8 x 8 scratch.
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup float* scratch = a_tile + 64 * simdgroup;
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 8; ++j) {
      simdgroup_store(accumulators[i][j], scratch, 8, ulong2(0, 0));
      simdgroup_barrier(mem_flags::mem_threadgroup);
      for (uint e = lane; e < 64; e += 32) {
        const uint row = simd_row + 8 * i + e / 8, column = simd_column + 8 * j + e % 8;
        if (aligned_blocks || (row0 + row < rows && column0 + column < columns)) {
          const float sum = scratch[e] + (p.has_bias ? column_bias[column] : 0.0f);
          output[row_output[row] + column_output[column]] = T(sum);
        }
      }
      simdgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
}

// convolution_tiled_ and convolution_strips_<columns>x<channels>_<dtype>: the block's pixel columns
// and output channels.
#define INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, COLUMN_FRAGMENTS, CHANNEL_FRAGMENTS)                    \
  template [[host_name("convolution_tiled_" #COLUMN_FRAGMENTS "x" #CHANNEL_FRAGMENTS "_" #SUFFIX)]]    \
  kernel void convolution_tiled<T, COLUMN_FRAGMENTS, CHANNEL_FRAGMENTS>(                               \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&,               \
      threadgroup float*, uint3, uint, uint, uint);                                                    \
  template [[host_name("convolution_strips_" #COLUMN_FRAGMENTS "x" #CHANNEL_FRAGMENTS "_" #SUFFIX)]]   \
  kernel void convolution_strips<T, COLUMN_FRAGMENTS, CHANNEL_FRAGMENTS>(                              \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&,               \
      threadgroup float*, uint3, uint);

#define INSTANTIATE_CONVOLUTION(T, SUFFIX)                                                        \
  template [[host_name("convolution_" #SUFFIX)]] kernel void convolution<T, false>(               \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);  \
  template [[host_name("convolution_transposed_" #SUFFIX)]] kernel void convolution<T, true>(     \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&, uint3);  \
  template [[host_name("convolution_patches_" #SUFFIX)]] kernel void convolution_patches<T>(       \
      device T*, const device T*, constant ConvParams&, uint3);                                    \
  template [[host_name("convolution_gemm_" #SUFFIX)]] kernel void convolution_gemm<T>(             \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&,          \
      threadgroup float*, uint3, uint, uint);                                                      \
  template [[host_name("convolution_depthwise_" #SUFFIX)]] kernel void convolution_depthwise<T>(   \
      device T*, const device T*, const device T*, const device T*, constant ConvParams&,          \
      threadgroup float*, uint3, uint3, uint);                                                     \
  template [[host_name("convolution_transposed_gemm_" #SUFFIX)]] kernel void                       \
  convolution_transposed_gemm<T>(device T*, const device T*, const device T*, const device T*,     \
                                 constant ConvParams&, uint3, uint, uint, uint);                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 1, 2)                                                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 1, 4)                                                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 1, 8)                                                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 2, 2)                                                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 2, 4)                                                   \
  INSTANTIATE_CONVOLUTION_TILED(T, SUFFIX, 2, 8)

INSTANTIATE_CONVOLUTION(float, float)
INSTANTIATE_CONVOLUTION(half, half)
INSTANTIATE_CONVOLUTION(bfloat, bfloat)
