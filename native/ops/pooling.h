// max_pool2d_with_indices, avg_pool2d and adaptive pooling as MSL kernels (shaders/pooling.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

struct PoolOutputs {
  std::unique_ptr<Tensor> values;   // self's dtype, contiguous
  std::unique_ptr<Tensor> indices;  // int64: flat positions h * W + w in the input plane
};

// torch's pooling_output_shape: the output length of one pooled dimension.
int64_t pooling_output_size(int64_t input, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                            bool ceil_mode);

// self [N, C, H, W] or [C, H, W], float32 / float16 / bfloat16, any strides. kernel_size,
// padding and dilation hold one value or two (H, W); stride too, or none for kernel_size.
// NaN propagates. Output sizes as torch computes them, ceil_mode included.
PoolOutputs max_pool2d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, bool ceil_mode);

// self as for max_pool2d_with_indices (no dilation). Each output is the window's float sum over
// divisor_override (not 0), or over the window's size clipped to the padded input
// (count_include_pad) or to the input; a window outside the input gives 0.
std::unique_ptr<Tensor> avg_pool2d(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                   const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                   bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override);

// Adaptive pooling of self (as for max_pool2d_with_indices) to output_size (OH, OW): output o
// covers input rows [floor(o * H / OH), ceil((o + 1) * H / OH)), columns alike. The mean, or
// with take_max the maximum and its index (as max_pool2d_with_indices; indices unset otherwise).
PoolOutputs adaptive_pool2d(const Tensor& self, const std::vector<int64_t>& output_size, bool take_max);

}  // namespace etm::ops
