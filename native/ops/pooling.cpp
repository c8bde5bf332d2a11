#include "ops/pooling.h"

#include <optional>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/pooling.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// The (H, W) pair a one- or two-value argument stands for; `fallback`'s when it is empty and
// a fallback is given.
void pair_of(const char* op, const char* name, const std::vector<int64_t>& values, int32_t* into,
             const std::vector<int64_t>* fallback = nullptr) {
  const std::vector<int64_t>& source = values.empty() && fallback ? *fallback : values;
  ETM_REQUIRE(source.size() == 1 || source.size() == 2, op, ": ", name,
              " must either be a single int, or a tuple of two ints");
  for (int i = 0; i < 2; ++i) {
    const int64_t value = source[source.size() == 1 ? 0 : i];
    ETM_REQUIRE(value >= 0 && value <= INT32_MAX, op, ": ", name, " value ", value, " is out of range");
    into[i] = static_cast<int32_t>(value);
  }
}

// The input planes of a 3-D or 4-D self ([N,] C, H, W): their strides and sizes.
void set_input_planes(const char* op, const Tensor& self, PoolParams& p) {
  const bool batched = self.dim() == 4;
  p.input_strides[0] = batched ? self.strides[0] : 0;
  p.input_strides[1] = self.strides[batched ? 1 : 0];
  p.input_strides[2] = self.strides[self.dim() - 2];
  p.input_strides[3] = self.strides[self.dim() - 1];
  p.channels = checked_u32(op, self.sizes[batched ? 1 : 0], "channel count");
  p.height = checked_u32(op, self.sizes[self.dim() - 2], "height");
  p.width = checked_u32(op, self.sizes[self.dim() - 1], "width");
}

struct PoolShape {
  std::vector<int64_t> out_sizes;
  int64_t planes;
};

// Checks a 2-D pooling's input and window (torch's pool2d_shape_check) and fills the
// geometry of `p`.
PoolShape plan_pool(const char* op, const Tensor& self, const std::vector<int64_t>& kernel_size,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation, bool ceil_mode, PoolParams& p) {
  require_mps(op, "self", self);
  ETM_REQUIRE(msl_float_type_name(self.dtype), op, ": dtype ", dtype_name(self.dtype),
              " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(self.dim() == 3 || self.dim() == 4, op, ": Expected 3D or 4D (batch mode) tensor for input, got ",
              self.dim(), " dimensions");
  pair_of(op, "kernel_size", kernel_size, p.window);
  pair_of(op, "stride", stride, p.stride, &kernel_size);
  pair_of(op, "padding", padding, p.padding);
  pair_of(op, "dilation", dilation, p.dilation);
  for (int i = 0; i < 2; ++i) {
    ETM_REQUIRE(p.window[i] > 0 && p.stride[i] > 0 && p.dilation[i] > 0, op,
                ": kernel_size, stride and dilation must be greater than zero");
    ETM_REQUIRE(p.padding[i] <= p.window[i] / 2, op, ": pad should be at most half of effective kernel size, but got pad=",
                p.padding[i], ", kernel_size=", p.window[i]);
  }
  const bool batched = self.dim() == 4;
  const int64_t batch = batched ? self.sizes[0] : 1;
  const int64_t channels = self.sizes[batched ? 1 : 0];
  const int64_t height = self.sizes[self.dim() - 2], width = self.sizes[self.dim() - 1];
  ETM_REQUIRE(height > 0 && width > 0, op, ": Expected input's non-batch dimensions to have positive length, got ",
              shape_text(self.sizes));
  const int64_t out_height = pooling_output_size(height, p.window[0], p.padding[0], p.stride[0], p.dilation[0], ceil_mode);
  const int64_t out_width = pooling_output_size(width, p.window[1], p.padding[1], p.stride[1], p.dilation[1], ceil_mode);
  ETM_REQUIRE(out_height >= 1 && out_width >= 1, op, ": Given input size ", shape_text(self.sizes),
              ". Calculated output size (", out_height, "x", out_width, "). Output size is too small");
  PoolShape shape{self.sizes, batch * channels};
  shape.out_sizes[self.dim() - 2] = out_height;
  shape.out_sizes[self.dim() - 1] = out_width;
  set_input_planes(op, self, p);
  p.out_height = checked_u32(op, out_height, "output height");
  p.out_width = checked_u32(op, out_width, "output width");
  checked_u32(op, shape.planes * out_height * out_width, "number of output elements");
  return shape;
}

}  // namespace

int64_t pooling_output_size(int64_t input, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode) {
  const int64_t span = input + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  const int64_t floor_div = span >= 0 ? span / stride : -((-span + stride - 1) / stride);
  int64_t size = floor_div + 1;
  if (ceil_mode && (size - 1) * stride >= input + pad) --size;
  return size;
}

PoolOutputs max_pool2d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, bool ceil_mode) {
  constexpr const char* op = "max_pool2d";
  PoolParams p{};
  const PoolShape shape = plan_pool(op, self, kernel_size, stride, padding, dilation, ceil_mode, p);
  Runtime& runtime = Runtime::get();
  PoolOutputs result;
  result.values = runtime.empty_tensor(shape.out_sizes, contiguous_strides(shape.out_sizes), self.dtype);
  result.indices = runtime.empty_tensor(shape.out_sizes, contiguous_strides(shape.out_sizes),
                                        static_cast<int32_t>(DType::int64));
  if (shape.planes == 0) return result;
  KernelLaunch launch(shader_kernel("pooling.metal", std::string("max_pool2d_") + msl_float_type_name(self.dtype)));
  launch.tensor(0, self).tensor(1, *result.values).tensor(2, *result.indices).value(3, p);
  const device::Size3 grid{p.out_width, p.out_height, static_cast<uint64_t>(shape.planes)};
  launch.threads(grid, default_group(grid, launch));
  return result;
}

std::unique_ptr<Tensor> avg_pool2d(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                   const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                   bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool2d";
  ETM_REQUIRE(!divisor_override || *divisor_override != 0, op, ": divisor must be not zero");
  ETM_REQUIRE(!divisor_override || (*divisor_override >= INT32_MIN && *divisor_override <= INT32_MAX), op,
              ": divisor ", *divisor_override, " is out of range");
  PoolParams p{};
  const PoolShape shape = plan_pool(op, self, kernel_size, stride, padding, {1}, ceil_mode, p);
  p.divisor = divisor_override ? static_cast<int32_t>(*divisor_override) : 0;
  p.count_include_pad = count_include_pad ? 1 : 0;
  auto out = Runtime::get().empty_tensor(shape.out_sizes, contiguous_strides(shape.out_sizes), self.dtype);
  if (shape.planes == 0) return out;
  KernelLaunch launch(shader_kernel("pooling.metal", std::string("avg_pool2d_") + msl_float_type_name(self.dtype)));
  launch.tensor(0, self).tensor(1, *out).value(2, p);
  const device::Size3 grid{p.out_width, p.out_height, static_cast<uint64_t>(shape.planes)};
  launch.threads(grid, default_group(grid, launch));
  return out;
}

PoolOutputs adaptive_pool2d(const Tensor& self, const std::vector<int64_t>& output_size, bool take_max) {
  const char* op = take_max ? "adaptive_max_pool2d" : "adaptive_avg_pool2d";
  require_mps(op, "self", self);
  ETM_REQUIRE(msl_float_type_name(self.dtype), op, ": dtype ", dtype_name(self.dtype),
              " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(self.dim() == 3 || self.dim() == 4, op, ": Expected 3D or 4D tensor, got ", self.dim(), " dimensions");
  ETM_REQUIRE(output_size.size() == 2, op, ": output_size must be 2");
  const bool batched = self.dim() == 4;
  const int64_t height = self.sizes[self.dim() - 2], width = self.sizes[self.dim() - 1];
  ETM_REQUIRE(height > 0 && width > 0, op, ": Expected input's non-batch dimensions to have positive length, got ",
              shape_text(self.sizes));
  ETM_REQUIRE(output_size[0] >= 0 && output_size[1] >= 0 && (!take_max || (output_size[0] > 0 && output_size[1] > 0)),
              op, ": output_size ", shape_text(output_size), " is not valid");
  PoolParams p{};
  std::vector<int64_t> out_sizes = self.sizes;
  out_sizes[self.dim() - 2] = output_size[0];
  out_sizes[self.dim() - 1] = output_size[1];
  const int64_t planes = (batched ? self.sizes[0] : 1) * self.sizes[batched ? 1 : 0];
  set_input_planes(op, self, p);
  p.out_height = checked_u32(op, output_size[0], "output height");
  p.out_width = checked_u32(op, output_size[1], "output width");
  checked_u32(op, planes * output_size[0] * output_size[1], "number of output elements");
  Runtime& runtime = Runtime::get();
  PoolOutputs result;
  result.values = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  if (take_max) {
    result.indices = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), static_cast<int32_t>(DType::int64));
  }
  if (result.values->numel() == 0) return result;
  const uint32_t max_flag = take_max ? 1 : 0;
  const device::Size3 grid{p.out_width, p.out_height, static_cast<uint64_t>(planes)};
  // With the GPU launch shape, windows of about kWindowMinimum elements or more (global pooling
  // of a feature map) take a threadgroup of kAdaptiveWindowThreads per output instead of one
  // thread walking the window.
  constexpr int64_t kWindowMinimum = 1024;
  const int64_t window_rows = (height + output_size[0] - 1) / output_size[0];
  const int64_t window = window_rows * ((width + output_size[1] - 1) / output_size[1]);
  const std::string type = msl_float_type_name(self.dtype);
  const std::string window_kernel = "adaptive_pool2d_window_" + type;
  const bool by_group = window >= kWindowMinimum && launch_shape() == LaunchShape::gpu &&
                        shader_kernel("pooling.metal", window_kernel).max_threads_per_group() >= kAdaptiveWindowThreads;
  KernelLaunch launch(shader_kernel("pooling.metal", by_group ? window_kernel : "adaptive_pool2d_" + type));
  launch.tensor(0, self).tensor(1, *result.values).tensor(2, take_max ? *result.indices : *result.values)
      .value(3, p).value(4, max_flag);
  if (by_group) {
    launch.threadgroups(grid, {uint64_t{kAdaptiveWindowThreads}, 1, 1});
  } else {
    launch.threads(grid, default_group(grid, launch));
  }
  return result;
}

}  // namespace etm::ops
