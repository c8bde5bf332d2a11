// max_pool3d_with_indices, avg_pool3d and max_unpool2d / max_unpool3d as MSL kernels
// (shaders/pooling3d.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ops/pooling.h"
#include "runtime/tensor.h"

namespace etm::ops {

// self [N, C, D, H, W] or [C, D, H, W], float32 / float16 / bfloat16 or int64 / int32 / int16 /
// int8 / uint8, any strides. kernel_size, padding and dilation hold one value or three
// (D, H, W); stride too, or none for kernel_size. Values in self's dtype, int64 indices
// d * H * W + h * W + w in the input plane; NaN propagates. Output sizes as torch computes them.
PoolOutputs max_pool3d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, bool ceil_mode);

// self as for max_pool3d_with_indices but floating only (no dilation). Each output is the
// window's float sum over divisor_override (not 0), or over the window's size clipped to the
// padded input (count_include_pad) or to the input; a window outside the input gives 0.
std::unique_ptr<Tensor> avg_pool3d(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                   const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                   bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override);

// Max unpooling: a zero tensor [N, C, *output_size] (or [C, *output_size]) where each element of
// self lands at the flat position its int64 index (same shape as self) names in its plane.
// spatial_dims 2 (self [N, C, H, W] / [C, H, W]) or 3 (self [N, C, D, H, W] / [C, D, H, W]);
// self floating or integer, any strides. stride and padding (3-D only, three values each) are
// checked as torch does and otherwise unused. An index outside the output plane is reported at
// the next synchronize; elements sharing an index leave one of their values.
std::unique_ptr<Tensor> max_unpool(const Tensor& self, const Tensor& indices, int spatial_dims,
                                   const std::vector<int64_t>& output_size, const std::vector<int64_t>& stride,
                                   const std::vector<int64_t>& padding);

}  // namespace etm::ops
