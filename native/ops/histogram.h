// histc as MSL kernels (shaders/histogram.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// Histogram of `self` (float32, float16 or bfloat16, any strides and dims) into `bins`
// equal-width bins over [min, max]; when min == max, over the data's own [min, max] (widened
// by 1 on each side when that range is a point). Elements outside the range and NaN are not
// counted. The result is a new 1-D tensor of `bins` counts in self's dtype. Bin positions are
// computed in float32. A data range that is not finite poisons the stream when the kernels
// have run (torch raises "range of [..] is not finite").
std::unique_ptr<Tensor> histc(const Tensor& self, int64_t bins, double min, double max);

}  // namespace etm::ops
