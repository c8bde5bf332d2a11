// _trilinear (the product behind torch.nn.functional.bilinear) as an MSL kernel
// (shaders/trilinear.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// Each input unsqueezed at its expand dimensions (all reach one rank R <= 8), broadcast where a
// size is 1, multiplied and summed over `sumdim`: a new contiguous tensor of the other
// dimensions. float32, float16 or bfloat16 (one dtype), any strides; float32 accumulation.
// unroll_dim (an algorithm choice in ATen) must be in [0, R).
std::unique_ptr<Tensor> trilinear(const Tensor& i1, const Tensor& i2, const Tensor& i3,
                                  const std::vector<int64_t>& expand1, const std::vector<int64_t>& expand2,
                                  const std::vector<int64_t>& expand3, const std::vector<int64_t>& sumdim,
                                  int64_t unroll_dim);

}  // namespace etm::ops
