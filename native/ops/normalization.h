// RMS normalization as an MSL kernel (shaders/normalization.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

struct RmsNormOutputs {
  std::unique_ptr<Tensor> output;  // input's shape and dtype, contiguous
  std::unique_ptr<Tensor> rstd;    // float32, input's leading sizes then 1 per normalized dim
};

// _fused_rms_norm: normalizes over the trailing dimensions `normalized_shape` of `input`
// (float32, float16 or bfloat16, any strides): out = x / sqrt(mean(x^2) + eps) * weight.
// `weight` (optional) has shape normalized_shape and the input's dtype. eps defaults to
// float32's machine epsilon for every dtype, as ATen does (opmath is float32). A row with no
// elements gives rstd NaN.
RmsNormOutputs fused_rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                              const Tensor* weight, std::optional<double> eps);

}  // namespace etm::ops
