#include "ops/cumulative.h"

#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/cumulative.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "cumulative.metal";
// With the GPU launch shape, lines of at least this many elements take the *_line kernels of
// cumprod, cummax / cummin and logcumsumexp (a threadgroup of kCumulativeLineThreads per line)
// instead of one thread per line.
constexpr uint32_t kLineMinimum = 1024;

// Line layout of self and of contiguous results of self's shape; false when there is no
// element to compute.
bool plan(const char* op, const Tensor& self, int64_t& dim, CumulativeParams& p) {
  const int64_t lines = lay_out_lines(op, self, dim, contiguous_strides(self.sizes), p.layout);
  if (lines == 0) return false;
  p.lines = checked_u32(op, lines, "number of lines");
  return true;
}

// Encodes "<op>_line_<type>" (a threadgroup of kCumulativeLineThreads per line) when ops take
// the GPU shape, p's lines are long and its pipeline takes that many threads per group, else
// "<op>_<type>" (a thread per line); bind sets the arguments, which both kernels take alike.
template <typename Bind>
void dispatch_lines(const std::string& op, const std::string& type, const CumulativeParams& p, Bind bind) {
  if (p.layout.length >= kLineMinimum && launch_shape() == LaunchShape::gpu) {
    KernelFunction& line_kernel = shader_kernel(kShaderFile, op + "_line_" + type);
    if (line_kernel.max_threads_per_group() >= kCumulativeLineThreads) {
      KernelLaunch launch(line_kernel);
      bind(launch);
      launch.threadgroups({p.lines, 1, 1}, {uint64_t{kCumulativeLineThreads}, 1, 1});
      return;
    }
  }
  KernelLaunch launch(shader_kernel(kShaderFile, op + "_" + type));
  bind(launch);
  const device::Size3 grid{p.lines, 1, 1};
  launch.threads(grid, default_group(grid, launch));
}

std::unique_ptr<Tensor> like(const Tensor& self, int32_t dtype) {
  return Runtime::get().empty_tensor(self.sizes, contiguous_strides(self.sizes), dtype);
}

}  // namespace

std::unique_ptr<Tensor> cumprod(const Tensor& self, int64_t dim, std::optional<int32_t> dtype) {
  constexpr const char* op = "cumprod";
  require_mps(op, "self", self);
  const int32_t out_dtype = scan_output_dtype(op, self, dtype);
  const char* input_name = msl_element_type_name(self.dtype);
  CumulativeParams p{};
  auto output = like(self, out_dtype);
  if (!plan(op, self, dim, p)) return output;
  dispatch_lines(op, std::string(input_name) + "_" + msl_element_type_name(out_dtype), p,
                 [&](KernelLaunch& launch) { launch.tensor(0, self).tensor(1, *output).value(2, p); });
  return output;
}

std::pair<std::unique_ptr<Tensor>, std::unique_ptr<Tensor>> cumulative_extreme(const Tensor& self,
                                                                                int64_t dim, bool max) {
  const char* op = max ? "cummax" : "cummin";
  require_mps(op, "self", self);
  const char* name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(name, op, ": input dtype ", dtype_name(self.dtype), " is not supported");
  CumulativeParams p{};
  auto values = like(self, self.dtype);
  auto indices = like(self, static_cast<int32_t>(DType::int64));
  if (plan(op, self, dim, p)) {
    dispatch_lines(op, name, p, [&](KernelLaunch& launch) {
      launch.tensor(0, self).tensor(1, *values).tensor(2, *indices).value(3, p);
    });
  }
  return {std::move(values), std::move(indices)};
}

std::unique_ptr<Tensor> logcumsumexp(const Tensor& self, int64_t dim) {
  constexpr const char* op = "logcumsumexp";
  require_float_operand(op, "self", self);
  CumulativeParams p{};
  auto output = like(self, self.dtype);
  if (!plan(op, self, dim, p)) return output;
  dispatch_lines(op, msl_float_type_name(self.dtype), p,
                 [&](KernelLaunch& launch) { launch.tensor(0, self).tensor(1, *output).value(2, p); });
  return output;
}

}  // namespace etm::ops
