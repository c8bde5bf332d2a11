#include "ops/histogram.h"

#include <cmath>
#include <cstring>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/histogram.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "histc";
constexpr const char* kShaderFile = "histogram.metal";
constexpr uint64_t kRangeThreads = 256;  // kRangeThreads in the shader

std::string range_text(double low, double high) {
  return "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
}

}  // namespace

std::unique_ptr<Tensor> histc(const Tensor& self, int64_t bins, double min, double max) {
  require_mps(kOp, "self", self);
  const char* suffix = msl_float_type_name(self.dtype);
  ETM_REQUIRE(suffix, kOp, ": input dtype ", dtype_name(self.dtype),
              " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(bins > 0, kOp, ": bins must be > 0, got ", bins);
  ETM_REQUIRE(self.dim() <= kHistogramMaxDims, kOp, ": at most ", kHistogramMaxDims, " dimensions are supported, not ",
              self.dim());
  const bool data_range = min == max;
  if (!data_range) {
    ETM_REQUIRE(std::isfinite(min) && std::isfinite(max), kOp, ": range of ", range_text(min, max),
                " is not finite");
    ETM_REQUIRE(min < max, kOp, ": max must be larger than min");
    ETM_REQUIRE(static_cast<float>(min) < static_cast<float>(max), kOp, ": the range ",
                range_text(min, max), " is empty in float32");
  }
  HistcParams p{};
  p.bins = checked_u32(kOp, bins, "bins");
  p.numel = checked_u32(kOp, self.numel(), "number of elements");
  p.dims = static_cast<uint32_t>(self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    p.sizes[d] = checked_u32(kOp, self.sizes[d], "size");
    p.strides[d] = self.strides[d];
  }

  Runtime& runtime = Runtime::get();
  Stream& stream = runtime.current_stream();
  auto output = runtime.empty_tensor({bins}, {1}, self.dtype);
  if (p.numel == 0) {
    stream.fill_buffer(output->storage->buffer, output->buffer_offset(),
                       static_cast<size_t>(bins) * output->itemsize(), 0);
    return output;
  }
  auto counts = runtime.empty_tensor({bins}, {1}, static_cast<int32_t>(DType::int32));
  // Shared: a completion check may read it after this call returns.
  std::shared_ptr<Tensor> range = runtime.empty_tensor({2}, {1}, static_cast<int32_t>(DType::float32));
  stream.fill_buffer(counts->storage->buffer, counts->buffer_offset(),
                     static_cast<size_t>(bins) * counts->itemsize(), 0);
  const std::string name(suffix);
  if (data_range) {
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_range_" + name));
    launch.tensor(0, self).tensor(1, *range).value(2, p)
        .completion_check([range]() -> std::string {
          const float* bounds = reinterpret_cast<const float*>(range->data());
          if (std::isfinite(bounds[0]) && std::isfinite(bounds[1])) return {};
          return std::string(kOp) + ": range of " + range_text(bounds[0], bounds[1]) + " is not finite";
        })
        .threads({kRangeThreads, 1, 1}, {kRangeThreads, 1, 1});
  } else {
    // A fresh buffer no command has used yet: written from the host before any encoding.
    float* bounds = reinterpret_cast<float*>(range->data());
    bounds[0] = static_cast<float>(min);
    bounds[1] = static_cast<float>(max);
  }
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_count_" + name));
    const device::Size3 grid{p.numel, 1, 1};
    launch.tensor(0, self).tensor(1, *counts).tensor(2, *range).value(3, p)
        .threads(grid, default_group(grid, launch));
  }
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_store_" + name));
    const device::Size3 grid{p.bins, 1, 1};
    launch.tensor(0, *counts).tensor(1, *output).threads(grid, default_group(grid, launch));
  }
  return output;
}

}  // namespace etm::ops
