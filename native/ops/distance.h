// _cdist_forward as an MSL kernel (shaders/distance.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/tensor.h"

namespace etm::ops {

// Pairwise p-norm distances of the rows of x1 [*, P, M] and x2 [*, R, M] (one floating dtype:
// float32, float16 or bfloat16; any strides; batch dimensions broadcast, at most 6): a contiguous
// [*, P, R]. p >= 0 (0 counts differing columns; infinity takes the largest difference).
// compute_mode (none, 0, 1 or 2) is checked as torch does; every mode computes the differences
// directly, the most accurate of torch's ways.
std::unique_ptr<Tensor> cdist(const Tensor& x1, const Tensor& x2, double p, std::optional<int64_t> compute_mode);

}  // namespace etm::ops
