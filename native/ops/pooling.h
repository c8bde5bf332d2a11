// max_pool2d_with_indices as an MSL kernel (shaders/pooling.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

struct PoolOutputs {
  std::unique_ptr<Tensor> values;   // self's dtype, contiguous
  std::unique_ptr<Tensor> indices;  // int64: flat positions h * W + w in the input plane
};

// self [N, C, H, W] or [C, H, W], float32 / float16 / bfloat16, any strides. kernel_size,
// padding and dilation hold one value or two (H, W); stride too, or none for kernel_size.
// NaN propagates. Output sizes as torch computes them, ceil_mode included.
PoolOutputs max_pool2d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, bool ceil_mode);

}  // namespace etm::ops
