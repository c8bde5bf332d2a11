#include "ops/convolution.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "ops/graph_fallbacks.h"
#include "ops/kernel_launch.h"
#include "ops/matmul.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/convolution.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "convolution";

// The implicit-GEMM kernel's geometry (shaders/convolution.metal) and the smallest problem
// it takes: below these, most of its 32 x 32 tiles would be padding.
constexpr uint64_t kGemmBlock = 32;
constexpr uint64_t kGemmDepth = 32;
constexpr uint64_t kGemmThreads = 128;
constexpr uint64_t kGemmWeightPitch = kGemmBlock + 1;
constexpr uint64_t kGemmMinimumPixels = 8;
constexpr int64_t kGemmMinimumChannels = 16;
constexpr int64_t kGemmMinimumDepth = 16;

// The pixel-block kernels' geometry (convolution_tiled, convolution_strips and
// convolution_depthwise) and the threadgroup memory their staged input window and weights must
// fit in. convolution_strips (the CPU launch shape) runs a thread per strip of 8 pixels of a row
// and 16 output channels.
constexpr uint64_t kTiledRows = 16;
constexpr uint64_t kTiledChunk = 8;
constexpr uint64_t kTiledThreads = 256;
constexpr uint64_t kStripChannels = 16;
constexpr uint64_t kTiledScratchFloats = 64 * (kTiledThreads / 32);
// Planes with fewer output pixels or rows (1-D problems among them) leave most of the
// 16-row pixel block empty: the flattened implicit GEMM wastes less there.
constexpr int64_t kTiledMinimumPlane = 32;
constexpr int64_t kTiledMinimumRows = 4;
constexpr uint64_t kDepthwiseRows = 8;
constexpr uint64_t kDepthwiseColumns = 32;
constexpr uint64_t kThreadgroupMemoryLimit = 32768;

// A per-dimension parameter list: `spatial` values, or one value for every dimension.
std::vector<int64_t> expanded(const char* name, const std::vector<int64_t>& values, size_t spatial,
                              int64_t minimum) {
  ETM_REQUIRE(values.size() == spatial || values.size() == 1, kOp, ": ", name, " has ", values.size(),
              " values for a ", spatial, "-D convolution");
  std::vector<int64_t> result = values.size() == 1 ? std::vector<int64_t>(spatial, values[0]) : values;
  for (int64_t v : result)
    ETM_REQUIRE(v >= minimum, kOp, ": ", name, " must be >= ", minimum, ", got ", shape_text(values));
  return result;
}

// Input rows or columns a block of `outputs` pixels reads along one spatial dimension.
uint64_t window_extent(uint64_t outputs, int64_t stride, int64_t kernel, int64_t dilation) {
  return (outputs - 1) * uint64_t(stride) + uint64_t(kernel - 1) * uint64_t(dilation) + 1;
}

// Threadgroup bytes of convolution_tiled with blocks of 8 * column_fragments pixel columns and
// 8 * channel_fragments output channels: the input window and one kernel row's weights.
uint64_t tiled_memory(const ConvParams& p, uint64_t column_fragments, uint64_t channel_fragments) {
  const uint64_t window = window_extent(kTiledRows, p.stride[1], p.kernel_sizes[1], p.dilation[1]) *
                          window_extent(8 * column_fragments, p.stride[2], p.kernel_sizes[2], p.dilation[2]) *
                          kTiledChunk;
  const uint64_t weights = uint64_t(p.kernel_sizes[2]) * kTiledChunk * 8 * channel_fragments;
  return std::max(window + weights, kTiledScratchFloats) * sizeof(float);
}

uint64_t depthwise_memory(const ConvParams& p) {
  const uint64_t taps = uint64_t(p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2]);
  return (taps + window_extent(kDepthwiseRows, p.stride[1], p.kernel_sizes[1], p.dilation[1]) *
                     window_extent(kDepthwiseColumns, p.stride[2], p.kernel_sizes[2], p.dilation[2])) *
         sizeof(float);
}

// Transposed convolution runs as one forward convolution per output phase (the outputs o
// with o % stride == residue in every dimension): o + padding = i * stride + k * dilation, so
// only the taps k with k * dilation == o + padding (mod stride) reach a phase, every output in
// it reads the input at stride 1, and the forward kernels' block machinery applies. Beyond this
// many phases (large strides: a dispatch for a few outputs each) the direct transposed kernel
// runs instead, in one dispatch.
constexpr int64_t kMaxTransposedPhases = 64;

// One spatial dimension of a phase as a forward problem of stride 1: its output q (original
// output residue + q * stride) applies its taps in forward order j = 0 .. taps - 1 to input
// q - padding + j * dilation with weight tap first_tap - j * tap_step.
struct PhaseAxis {
  int64_t outputs = 0;
  int64_t taps = 0;
  int64_t first_tap = 0;
  int64_t tap_step = 1;
  int64_t dilation = 1;
  int64_t padding = 0;
};

PhaseAxis phase_axis(int64_t residue, int64_t output_size, int64_t stride, int64_t padding, int64_t dilation,
                     int64_t kernel) {
  PhaseAxis axis;
  axis.outputs = (output_size - residue + stride - 1) / stride;
  const int64_t common = std::gcd(stride, dilation);
  axis.tap_step = stride / common;
  axis.dilation = dilation / common;
  // Taps reaching the phase are lowest + m * tap_step, where lowest * dilation == target.
  const int64_t target = (residue + padding) % stride;
  const int64_t candidates = std::min(kernel, axis.tap_step);
  int64_t lowest = 0;
  while (lowest < candidates && lowest * dilation % stride != target) ++lowest;
  if (lowest == candidates) return axis;  // no tap: the phase's outputs are bias only
  axis.taps = (kernel - 1 - lowest) / axis.tap_step + 1;
  axis.first_tap = lowest + (axis.taps - 1) * axis.tap_step;
  // Tap `lowest` reads input q + (residue + padding - lowest * dilation) / stride.
  axis.padding = (lowest * dilation - (residue + padding)) / stride + (axis.taps - 1) * axis.dilation;
  return axis;
}

uint64_t blocks(uint64_t extent, uint64_t block) { return (extent + block - 1) / block; }

// convolution_gemm keeps input positions (padding and dilated taps included) in 32-bit integers.
bool positions_fit_int32(const ConvParams& p) {
  for (size_t d = 0; d < 3; ++d) {
    const int64_t span = (p.output_sizes[d] - 1) * p.stride[d] + (p.kernel_sizes[d] - 1) * p.dilation[d];
    if (p.input_sizes[d] + p.padding[d] > INT32_MAX || span > INT32_MAX) return false;
  }
  return true;
}

// convolution_transposed_gemm's geometry: 128 x 128 blocks of (input pixels, output channel and
// tap pairs), 16-deep reduction steps, eight simdgroups. Below a block's worth of rows or columns,
// or a step's worth of input channels, the phase path (a forward problem per phase) wastes less.
constexpr uint64_t kPhaseBlock = 128;
constexpr int64_t kPhaseDepth = 16;
constexpr uint64_t kPhaseThreads = 256;

// A transposed convolution whose kernel equals its stride (no padding, dilation or output
// padding) as one GEMM: each output pixel gets one tap of one input pixel. False when the
// problem has another shape or is too small for the kernel's blocks.
bool encode_transposed_gemm(const ConvParams& p, const Tensor& output, const Tensor& input, const Tensor& weight,
                            const Tensor* bias, const std::string& suffix) {
  for (size_t d = 0; d < 3; ++d) {
    if (p.kernel_sizes[d] != p.stride[d] || p.padding[d] != 0 || (p.dilation[d] != 1 && p.kernel_sizes[d] != 1) ||
        p.output_sizes[d] != p.input_sizes[d] * p.stride[d])
      return false;
  }
  const uint64_t rows = uint64_t(p.batch * p.input_sizes[0] * p.input_sizes[1] * p.input_sizes[2]);
  const uint64_t columns =
      uint64_t(p.out_channels_per_group * p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2]);
  if (rows < kPhaseBlock || columns < kPhaseBlock || p.in_channels_per_group < kPhaseDepth) return false;
  const std::string name = "convolution_transposed_gemm_" + suffix;
  // Every function constant the kernel declares, so both devices build the same specialisation.
  KernelFunction& kernel = shader_kernel(
      "convolution.metal", name,
      bool_constants({{"aligned_blocks", rows % kPhaseBlock == 0 && columns % kPhaseBlock == 0},
                      {"aligned_depth", p.in_channels_per_group % kPhaseDepth == 0}}));
  if (kernel.max_threads_per_group() < kPhaseThreads) return false;
  const uint64_t groups = uint64_t(p.out_channels / p.out_channels_per_group);
  ETM_REQUIRE(blocks(rows, kPhaseBlock) <= UINT32_MAX, kOp, ": ", rows, " input pixels exceed the dispatch limit");
  KernelLaunch launch(kernel);
  launch.tensor(0, output).tensor(1, input).tensor(2, weight).tensor(3, bias ? *bias : output).value(4, p);
  launch.threadgroups({blocks(columns, kPhaseBlock), blocks(rows, kPhaseBlock), groups}, {kPhaseThreads, 1, 1});
  return true;
}

// The operands of one forward problem as its kernels bind them. Empty operands may have no
// buffer, so the output stands in for any the kernel does not read.
struct ForwardOperands {
  const Tensor& output;
  size_t output_offset;  // elements past the output's first element
  const Tensor& input;
  const Tensor& weight;
  const Tensor* bias;
};

int64_t reduction_depth(const ConvParams& p) {
  return p.in_channels_per_group * p.kernel_sizes[0] * p.kernel_sizes[1] * p.kernel_sizes[2];
}

// With no taps, no input channels or an empty input a kernel reads nothing but its bias.
bool reads_input(const ConvParams& p, const ForwardOperands& operands) {
  return reduction_depth(p) > 0 && operands.input.numel() > 0;
}

KernelLaunch& bind(KernelLaunch& launch, const ConvParams& p, const ForwardOperands& operands) {
  const bool reads = reads_input(p, operands);
  return launch.tensor(0, operands.output, operands.output_offset)
      .tensor(1, reads ? operands.input : operands.output)
      .tensor(2, reads ? operands.weight : operands.output)
      .tensor(3, operands.bias ? *operands.bias : operands.output)
      .value(4, p);
}

// One thread per output element: convolution_<type> or convolution_transposed_<type>.
void encode_direct(const ConvParams& p, const ForwardOperands& operands, const std::string& name) {
  const uint64_t grid_x = uint64_t(p.output_sizes[2]);
  const uint64_t grid_y = uint64_t(p.output_sizes[0] * p.output_sizes[1]);
  const uint64_t grid_z = uint64_t(p.batch * p.out_channels);
  for (uint64_t extent : {grid_x, grid_y, grid_z})
    ETM_REQUIRE(extent <= UINT32_MAX, kOp, ": the output has ", extent,
                " elements along one dispatch dimension, more than 2^32 - 1");
  KernelLaunch launch(shader_kernel("convolution.metal", name));
  bind(launch, p, operands);
  const uint64_t group_x = std::min<uint64_t>(grid_x, 32);
  const uint64_t group_y = std::min<uint64_t>(grid_y, std::max<uint64_t>(1, 128 / group_x));
  launch.threads({grid_x, grid_y, grid_z}, {group_x, group_y, 1});
}

// Whether each output channel's weights (input channel and taps of one group) form one dense
// block: then they are one row of a matrix product, read in the order they lie.
bool weight_rows_are_dense(const ConvParams& p) {
  if (p.weight_offset != 0) return false;
  const int64_t sizes[4] = {p.in_channels_per_group, p.kernel_sizes[0], p.kernel_sizes[1], p.kernel_sizes[2]};
  std::vector<std::pair<int64_t, int64_t>> axes;  // (stride, size) of the axes that vary
  for (size_t a = 0; a < 4; ++a)
    if (sizes[a] > 1) axes.emplace_back(p.weight_strides[1 + a], sizes[a]);
  std::sort(axes.begin(), axes.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : axes) {
    if (stride != expected) return false;
    expected *= size;
  }
  return p.weight_strides[0] > 0;
}

// A problem with few output pixels (few_pixels_for_gemm: under 32, which each thread of
// convolution_patches walks) and dense weight rows, into a fresh contiguous output: the patch
// matrix (convolution_patches, a thread per reduction step and group) and per group one batched
// product out[n] = patches[n] @ weight rows^T (+ bias) on the matrix-product kernels, which
// read each weight row once where the direct kernel reads it once per output pixel.
void encode_patch_product(const ConvParams& p, const ForwardOperands& operands, const std::string& suffix) {
  const int64_t depth = reduction_depth(p);
  const int64_t image_pixels = p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2];
  const int64_t pixels = p.batch * image_pixels;
  const int64_t groups = p.out_channels / p.out_channels_per_group;
  const int64_t channels = p.out_channels_per_group;
  std::unique_ptr<Tensor> patches =
      Runtime::get().empty_tensor({groups, pixels, depth}, contiguous_strides({groups, pixels, depth}),
                                  operands.input.dtype);
  KernelLaunch launch(shader_kernel("convolution.metal", "convolution_patches_" + suffix));
  launch.tensor(0, *patches).tensor(1, operands.input).value(2, p);
  launch.threads({uint64_t(depth), 1, uint64_t(groups)},
                 {std::min<uint64_t>(uint64_t(depth), 256), 1, 1});
  for (int64_t g = 0; g < groups; ++g) {
    const Tensor out = strided_view(operands.output, {p.batch, image_pixels, channels},
                                    {p.out_channels * image_pixels, 1, image_pixels}, g * channels * image_pixels);
    const Tensor rows =
        strided_view(*patches, {p.batch, image_pixels, depth}, {image_pixels * depth, depth, 1}, g * pixels * depth);
    const Tensor weights = strided_view(operands.weight, {p.batch, depth, channels}, {0, 1, p.weight_strides[0]},
                                        g * p.weight_group_stride);
    if (!operands.bias) {
      bmm_out(out, rows, weights);
      continue;
    }
    const Tensor bias = strided_view(*operands.bias, {p.batch, image_pixels, channels}, {0, 0, p.bias_stride},
                                     g * channels * p.bias_stride);
    baddbmm_out(out, bias, rows, weights, 1.0, 1.0);
  }
}

// Whether `pixels` output pixels are too few for the implicit GEMM's 32-pixel blocks, so that the
// patch matrix product does less work: below kGemmMinimumPixels always, below one block with a
// block's worth of output channels (callgrind, tools/bench_conv_instructions.py, 1 worker,
// instructions per call as GEMM and as product: 256 -> 256 channels 3x3 at 4x4 45 M and 8 M;
// 64 -> 64 at 5x5 3.2 M and 1.5 M; 32 -> 32 at 4x4 0.8 M and 0.4 M; 16 -> 16 at 4x4 0.43 M
// and 0.48 M, the product's second dispatch about its whole cost there).
bool few_pixels_for_gemm(const ConvParams& p, uint64_t pixels) {
  return pixels < kGemmMinimumPixels ||
         (pixels < kGemmBlock && uint64_t(p.out_channels_per_group) >= kGemmBlock);
}

// Encodes forward convolution `p` with the first kernel that takes it: depthwise, pixel-block
// implicit GEMM, patch matrix product (few pixels), flattened implicit GEMM, direct.
void encode_forward(const ConvParams& p, const ForwardOperands& operands, const std::string& suffix) {
  const int64_t depth = reduction_depth(p);
  const bool reads = reads_input(p, operands);
  const int64_t groups = p.out_channels / p.out_channels_per_group;
  const uint64_t pixels = uint64_t(p.batch) * uint64_t(p.output_sizes[0] * p.output_sizes[1] * p.output_sizes[2]);
  const int64_t plane = p.output_sizes[1] * p.output_sizes[2];
  const uint64_t planes = uint64_t(p.batch) * uint64_t(p.output_sizes[0]);
  const std::vector<int64_t> output_sizes = {p.batch, p.out_channels, p.output_sizes[0], p.output_sizes[1],
                                             p.output_sizes[2]};
  uint64_t column_fragments = p.output_sizes[2] > 8 ? 2 : 1;
  // On the CPU device a strip of 16 channels costs the same whether its channels exist or not:
  // groups of up to 16 output channels take 16-channel blocks there (a GPU's 32-channel blocks
  // keep its simdgroups busier).
  uint64_t channel_fragments = p.out_channels_per_group > 32                                   ? 8
                               : p.out_channels_per_group > 16 || launch_shape() == LaunchShape::gpu ? 4
                                                                                                   : 2;
  if (reads && tiled_memory(p, column_fragments, channel_fragments) > kThreadgroupMemoryLimit)
    column_fragments = 1;
  if (reads && tiled_memory(p, column_fragments, channel_fragments) > kThreadgroupMemoryLimit)
    channel_fragments = std::min<uint64_t>(channel_fragments, 4);
  const uint64_t tiled_bytes = reads ? tiled_memory(p, column_fragments, channel_fragments) : 0;

  // The block kernels need their full threadgroup (a GPU may allow fewer threads to a pipeline).
  const bool strips = launch_shape() == LaunchShape::cpu;
  const std::string tiled_name = std::string(strips ? "convolution_strips_" : "convolution_tiled_") +
                                 std::to_string(column_fragments) + "x" + std::to_string(channel_fragments) + "_" +
                                 suffix;
  const uint64_t tiled_threads =
      strips ? kTiledRows * column_fragments * (8 * channel_fragments / kStripChannels) : kTiledThreads;
  const std::string depthwise_name = "convolution_depthwise_" + suffix;
  auto takes_threads = [](const std::string& name, uint64_t threads) {
    return shader_kernel("convolution.metal", name).max_threads_per_group() >= threads;
  };
  if (reads && p.in_channels_per_group == 1 && depthwise_memory(p) <= kThreadgroupMemoryLimit &&
      takes_threads(depthwise_name, kDepthwiseRows * kDepthwiseColumns)) {
    const uint64_t pixel_blocks = blocks(uint64_t(p.output_sizes[1]), kDepthwiseRows) *
                                  blocks(uint64_t(p.output_sizes[2]), kDepthwiseColumns);
    const uint64_t channel_planes = planes * uint64_t(p.out_channels);
    ETM_REQUIRE(pixel_blocks <= UINT32_MAX && channel_planes <= UINT32_MAX, kOp, ": the output of shape ",
                shape_text(output_sizes), " exceeds the dispatch limit");
    KernelLaunch launch(shader_kernel("convolution.metal", depthwise_name));
    bind(launch, p, operands).threadgroup_memory(0, depthwise_memory(p));
    launch.threadgroups({pixel_blocks, 1, channel_planes}, {kDepthwiseColumns, kDepthwiseRows, 1});
  } else if (reads && plane >= kTiledMinimumPlane && p.output_sizes[1] >= kTiledMinimumRows &&
             tiled_bytes <= kThreadgroupMemoryLimit && takes_threads(tiled_name, tiled_threads)) {
    const uint64_t pixel_blocks = blocks(uint64_t(p.output_sizes[1]), kTiledRows) *
                                  blocks(uint64_t(p.output_sizes[2]), 8 * column_fragments);
    const uint64_t group_planes = planes * uint64_t(groups);
    ETM_REQUIRE(pixel_blocks <= UINT32_MAX && group_planes <= UINT32_MAX, kOp, ": the output of shape ",
                shape_text(output_sizes), " exceeds the dispatch limit");
    KernelLaunch launch(shader_kernel("convolution.metal", tiled_name));
    bind(launch, p, operands).threadgroup_memory(0, tiled_bytes);
    launch.threadgroups({pixel_blocks, blocks(uint64_t(p.out_channels_per_group), 8 * channel_fragments),
                         group_planes},
                        {tiled_threads, 1, 1});
  } else if (reads && few_pixels_for_gemm(p, pixels) && p.out_channels_per_group >= kGemmMinimumChannels &&
             depth >= kGemmMinimumDepth && operands.output_offset == 0 && operands.output.is_contiguous() &&
             weight_rows_are_dense(p)) {
    encode_patch_product(p, operands, suffix);
  } else if (reads && pixels >= kGemmMinimumPixels && p.out_channels_per_group >= kGemmMinimumChannels &&
             depth >= kGemmMinimumDepth && positions_fit_int32(p)) {
    const uint64_t pixel_blocks = blocks(pixels, kGemmBlock);
    ETM_REQUIRE(pixel_blocks <= UINT32_MAX, kOp, ": ", pixels, " output pixels exceed the dispatch limit");
    KernelLaunch launch(shader_kernel("convolution.metal", "convolution_gemm_" + suffix));
    bind(launch, p, operands)
        .threadgroup_memory(0, (kGemmBlock * kGemmDepth + kGemmDepth * kGemmWeightPitch) * sizeof(float));
    launch.threadgroups({blocks(uint64_t(p.out_channels_per_group), kGemmBlock), pixel_blocks, uint64_t(groups)},
                        {kGemmThreads, 1, 1});
  } else {
    encode_direct(p, operands, "convolution_" + suffix);
  }
}

}  // namespace

std::unique_ptr<Tensor> convolution(const Tensor& input, const Tensor& weight, const Tensor* bias,
                                    const ConvolutionOptions& options) {
  require_float_operand(kOp, "input", input);
  require_float_operand(kOp, "weight", weight);
  ETM_REQUIRE(input.dim() >= 3 && input.dim() <= 5, kOp, ": input must be 3-D, 4-D or 5-D ([N, C, *spatial]), got shape ",
              shape_text(input.sizes));
  ETM_REQUIRE(weight.dim() == input.dim(), kOp, ": weight of shape ", shape_text(weight.sizes),
              " does not match input of shape ", shape_text(input.sizes), " (", input.dim(), "-D expected)");
  ETM_REQUIRE(weight.dtype == input.dtype, kOp, ": weight has dtype ", dtype_name(weight.dtype),
              " but input has ", dtype_name(input.dtype));
  const size_t spatial = static_cast<size_t>(input.dim() - 2);
  const std::vector<int64_t> stride = expanded("stride", options.stride, spatial, 1);
  const std::vector<int64_t> padding = expanded("padding", options.padding, spatial, 0);
  const std::vector<int64_t> dilation = expanded("dilation", options.dilation, spatial, 1);
  const std::vector<int64_t> output_padding =
      options.output_padding.empty() ? std::vector<int64_t>(spatial, 0)
                                     : expanded("output_padding", options.output_padding, spatial, 0);
  const int64_t groups = options.groups;
  ETM_REQUIRE(groups > 0, kOp, ": groups must be positive, got ", groups);

  const int64_t batch = input.sizes[0];
  const int64_t in_channels = input.sizes[1];
  ETM_REQUIRE(in_channels % groups == 0, kOp, ": ", in_channels, " input channels are not divisible by ",
              groups, " groups");
  int64_t out_channels;
  if (options.transposed) {
    ETM_REQUIRE(weight.sizes[0] == in_channels, kOp, ": transposed weight of shape ", shape_text(weight.sizes),
                " needs ", in_channels, " (input channels) in dimension 0, input has shape ",
                shape_text(input.sizes));
    out_channels = weight.sizes[1] * groups;
    for (size_t d = 0; d < spatial; ++d) {
      ETM_REQUIRE(output_padding[d] < stride[d] || output_padding[d] < dilation[d], kOp,
                  ": output_padding ", shape_text(output_padding), " must be smaller than stride or dilation");
    }
  } else {
    out_channels = weight.sizes[0];
    ETM_REQUIRE(weight.sizes[1] * groups == in_channels, kOp, ": weight of shape ", shape_text(weight.sizes),
                " expects ", weight.sizes[1] * groups, " input channels with ", groups,
                " groups, but input of shape ", shape_text(input.sizes), " has ", in_channels);
    ETM_REQUIRE(out_channels % groups == 0, kOp, ": ", out_channels, " output channels are not divisible by ",
                groups, " groups");
    for (int64_t v : output_padding)
      ETM_REQUIRE(v == 0, kOp, ": output_padding ", shape_text(output_padding),
                  " applies only to transposed convolution");
  }
  if (bias) {
    require_float_operand(kOp, "bias", *bias);
    ETM_REQUIRE(bias->dtype == input.dtype, kOp, ": bias has dtype ", dtype_name(bias->dtype),
                " but input has ", dtype_name(input.dtype));
    ETM_REQUIRE(bias->dim() == 1 && bias->sizes[0] == out_channels, kOp, ": bias of shape ",
                shape_text(bias->sizes), " does not match ", out_channels, " output channels");
  }

  for (size_t d = 0; d < spatial; ++d)
    ETM_REQUIRE(weight.sizes[2 + d] > 0, kOp, ": weight of shape ", shape_text(weight.sizes),
                " has an empty kernel");

  std::vector<int64_t> output_sizes = {batch, out_channels};
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t in = input.sizes[2 + d];
    const int64_t span = dilation[d] * (weight.sizes[2 + d] - 1);
    const int64_t size = options.transposed
                             ? (in - 1) * stride[d] - 2 * padding[d] + span + output_padding[d] + 1
                             : (in + 2 * padding[d] - span - 1) / stride[d] + 1;
    const bool fits = options.transposed ? size > 0 : in + 2 * padding[d] > span;
    ETM_REQUIRE(fits, kOp, ": output size ", size, " in spatial dimension ", d, " is too small (input ",
                shape_text(input.sizes), ", weight ", shape_text(weight.sizes), ", stride ", shape_text(stride),
                ", padding ", shape_text(padding), ", dilation ", shape_text(dilation), ")");
    output_sizes.push_back(size);
  }
  // Contiguous whatever the input layout: that is the layout Inductor's fake convolution
  // gives an mps output when torch is built without MPS (the compile path of etmetal_py), and
  // generated code indexes the result with the compiled strides.
  std::unique_ptr<Tensor> output =
      Runtime::get().empty_tensor(output_sizes, contiguous_strides(output_sizes), input.dtype);
  if (output->numel() == 0) return output;
  if (!options.transposed && spatial == 2 && input.numel() > 0 &&
      encode_convolution2d_graph(*output, input, weight, bias, stride.data(), padding.data(), dilation.data(),
                                 groups))
    return output;

  // Every problem runs as 3-D: missing leading spatial dimensions get size 1.
  ConvParams params{};
  params.batch = batch;
  params.out_channels = out_channels;
  params.in_channels_per_group = in_channels / groups;
  params.out_channels_per_group = out_channels / groups;
  const size_t lead = 3 - spatial;
  for (size_t d = 0; d < 3; ++d) {
    params.input_sizes[d] = params.output_sizes[d] = params.kernel_sizes[d] = 1;
    params.stride[d] = params.dilation[d] = 1;
    params.padding[d] = 0;
  }
  for (size_t d = 0; d < spatial; ++d) {
    params.input_sizes[lead + d] = input.sizes[2 + d];
    params.output_sizes[lead + d] = output_sizes[2 + d];
    params.kernel_sizes[lead + d] = weight.sizes[2 + d];
    params.stride[lead + d] = stride[d];
    params.padding[lead + d] = padding[d];
    params.dilation[lead + d] = dilation[d];
  }
  auto spread_strides = [&](const std::vector<int64_t>& strides, int64_t* into) {
    into[0] = strides[0];
    into[1] = strides[1];
    for (size_t d = 0; d < 3; ++d) into[2 + d] = d < lead ? 0 : strides[2 + d - lead];
  };
  spread_strides(input.strides, params.input_strides);
  spread_strides(weight.strides, params.weight_strides);
  spread_strides(output->strides, params.output_strides);
  params.has_bias = bias != nullptr;
  params.bias_stride = bias ? bias->strides[0] : 0;
  const std::string suffix = msl_float_type_name(input.dtype);
  if (!options.transposed) {
    params.weight_group_stride = params.out_channels_per_group * params.weight_strides[0];
    encode_forward(params, {*output, 0, input, weight, bias}, suffix);
    return output;
  }
  params.weight_group_stride = params.in_channels_per_group * params.weight_strides[0];
  if (input.numel() > 0 && encode_transposed_gemm(params, *output, input, weight, bias, suffix)) return output;
  int64_t phases = 1;
  for (size_t d = lead; d < 3; ++d) phases *= std::min(params.stride[d], params.output_sizes[d]);
  if (phases > kMaxTransposedPhases) {
    encode_direct(params, {*output, 0, input, weight, bias}, "convolution_transposed_" + suffix);
    return output;
  }
  // One forward problem per output phase (every phase has outputs: a residue below the output
  // size), with the weight's input and output channel strides swapped.
  ConvParams forward = params;
  std::swap(forward.weight_strides[0], forward.weight_strides[1]);
  for (int64_t phase = 0; phase < phases; ++phase) {
    size_t output_offset = 0;
    forward.weight_offset = 0;
    for (size_t d = 3, rest = size_t(phase); d-- > lead;) {
      const int64_t extent = std::min(params.stride[d], params.output_sizes[d]);
      const int64_t residue = int64_t(rest % size_t(extent));
      rest /= size_t(extent);
      const PhaseAxis axis = phase_axis(residue, params.output_sizes[d], params.stride[d], params.padding[d],
                                        params.dilation[d], params.kernel_sizes[d]);
      forward.output_sizes[d] = axis.outputs;
      forward.kernel_sizes[d] = axis.taps;
      forward.stride[d] = 1;
      forward.padding[d] = axis.padding;
      forward.dilation[d] = axis.dilation;
      forward.output_strides[2 + d] = params.output_strides[2 + d] * params.stride[d];
      forward.weight_strides[2 + d] = -params.weight_strides[2 + d] * axis.tap_step;
      output_offset += size_t(residue * params.output_strides[2 + d]);
      forward.weight_offset += axis.first_tap * params.weight_strides[2 + d];
    }
    encode_forward(forward, {*output, output_offset, input, weight, bias}, suffix);
  }
  return output;
}

}  // namespace etm::ops
