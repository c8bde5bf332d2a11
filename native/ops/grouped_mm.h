// torch._grouped_mm as an MSL kernel (shaders/grouped_mm.metal), ATen semantics: a and b of one
// floating dtype (float32, float16, bfloat16), 2-D or 3-D, any strides; `offs` (int32, 1-D,
// running group ends) is required when either operand is 2-D and refused otherwise. Shapes:
// a [M, K] x b [G, K, N] -> [M, N] (offs over rows), a [G, M, K] x b [K, N] -> [M, N] (over
// columns), a [M, K] x b [K, N] -> [G, M, N] (over the depth), a [G, M, K] x b [G, K, N] ->
// [G, M, N]. Rows or columns past the last end are zeros (ATen leaves them uninitialized).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/tensor.h"

namespace etm::ops {

std::unique_ptr<Tensor> grouped_mm(const Tensor& a, const Tensor& b, const Tensor* offs,
                                   std::optional<int32_t> out_dtype);

}  // namespace etm::ops
