// Cumulative sum as MSL kernels (shaders/scan.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/tensor.h"

namespace etm::ops {

// cumsum of `self` (any strides) along `dim` (negative counts from the end). The result has
// `dtype` when given, else self's dtype for floating inputs and int64 for integer and bool
// inputs (torch's rule). Supported: floating self to float32/float16/bfloat16; integer or
// bool self to int64/int32/float32. Elements are converted to the result dtype before they
// are summed (in float32 for floating results, 64-bit wrapping integers otherwise).
std::unique_ptr<Tensor> cumsum(const Tensor& self, int64_t dim, std::optional<int32_t> dtype);

}  // namespace etm::ops
