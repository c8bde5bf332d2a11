#include "ops/grid_sampler.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/grid_sampler.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

}  // namespace

std::unique_ptr<Tensor> grid_sampler_3d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode,
                                        int64_t padding_mode, bool align_corners) {
  constexpr const char* op = "grid_sampler_3d";
  require_mps(op, "input", input);
  require_mps(op, "grid", grid);
  const char* type = msl_float_type_name(input.dtype);
  ETM_REQUIRE(type, op, ": dtype ", dtype_name(input.dtype), " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(input.dtype == grid.dtype, op, ": expected input and grid to have same dtype, but input has ",
              dtype_name(input.dtype), " and grid has ", dtype_name(grid.dtype));
  ETM_REQUIRE(input.dim() == 5 && grid.dim() == 5, op,
              ": expected 5D input and grid with same number of dimensions, but got input with sizes ",
              shape_text(input.sizes), " and grid with sizes ", shape_text(grid.sizes));
  ETM_REQUIRE(input.sizes[0] == grid.sizes[0], op,
              ": expected grid and input to have same batch size, but got input with sizes ", shape_text(input.sizes),
              " and grid with sizes ", shape_text(grid.sizes));
  ETM_REQUIRE(grid.sizes[4] == 3, op, ": expected grid to have size 3 in last dimension, but got grid with sizes ",
              shape_text(grid.sizes));
  for (int d = 2; d < 5; ++d) {
    ETM_REQUIRE(input.sizes[d] > 0, op, ": expected input to have non-empty spatial dimensions, but input has sizes ",
                shape_text(input.sizes), " with dimension ", d, " being empty");
  }
  ETM_REQUIRE(interpolation_mode == 0 || interpolation_mode == 1, op, ": interpolation mode ", interpolation_mode,
              " is not supported for 3-D inputs (0 bilinear, 1 nearest; bicubic needs 4-D input)");
  ETM_REQUIRE(padding_mode >= 0 && padding_mode <= 2, op, ": padding mode ", padding_mode,
              " is not valid (0 zeros, 1 border, 2 reflection)");
  const std::vector<int64_t> out_sizes{input.sizes[0], input.sizes[1], grid.sizes[1], grid.sizes[2], grid.sizes[3]};
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), input.dtype);
  if (out->numel() == 0) return out;
  GridSamplerParams p{};
  for (int d = 0; d < 5; ++d) {
    p.input_strides[d] = input.strides[d];
    p.grid_strides[d] = grid.strides[d];
  }
  p.channels = checked_u32(op, input.sizes[1], "channel count");
  for (int i = 0; i < 3; ++i) {
    p.in_size[i] = checked_u32(op, input.sizes[2 + i], "input size");
    p.out_size[i] = checked_u32(op, grid.sizes[1 + i], "grid size");
  }
  p.nearest = interpolation_mode == 1 ? 1 : 0;
  p.padding_mode = static_cast<uint32_t>(padding_mode);
  p.align_corners = align_corners ? 1 : 0;
  const int64_t depth_planes = input.sizes[0] * grid.sizes[1];
  checked_u32(op, depth_planes, "batch times output depth");
  checked_u32(op, out->numel(), "number of output elements");
  KernelLaunch launch(shader_kernel("grid_sampler.metal", std::string("grid_sampler_3d_") + type));
  launch.tensor(0, input).tensor(1, grid).tensor(2, *out).value(3, p);
  const device::Size3 grid_size{p.out_size[2], p.out_size[1], static_cast<uint64_t>(depth_planes)};
  launch.threads(grid_size, default_group(grid_size, launch));
  return out;
}

}  // namespace etm::ops
