// grid_sampler_3d as an MSL kernel (shaders/grid_sampler.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// Samples input [N, C, D, H, W] at grid [N, D', H', W', 3] (x, y, z in [-1, 1]; same floating
// dtype: float32, float16 or bfloat16; any strides) into a contiguous [N, C, D', H', W'].
// interpolation_mode 0 bilinear (trilinear), 1 nearest; padding_mode 0 zeros, 1 border,
// 2 reflection.
std::unique_ptr<Tensor> grid_sampler_3d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode,
                                        int64_t padding_mode, bool align_corners);

}  // namespace etm::ops
