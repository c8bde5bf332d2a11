// histc, histogram and histogramdd with bin counts as MSL kernels (shaders/histogram.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// Histogram of `self` (float32, float16 or bfloat16, any strides and dims) into `bins`
// equal-width bins over [min, max]; when min == max, over the data's own [min, max] (widened
// by 1 on each side when that range is a point). Elements outside the range and NaN are not
// counted. The result is a new 1-D tensor of `bins` counts in self's dtype. Bin positions are
// computed in float32. A data range that is not finite poisons the stream when the kernels
// have run (torch raises "range of [..] is not finite").
std::unique_ptr<Tensor> histc(const Tensor& self, int64_t bins, double min, double max);

struct HistogramOutputs {
  std::unique_ptr<Tensor> hist;   // float32, shaped by the bin counts
  std::unique_ptr<Tensor> edges;  // float32, 1-D: each coordinate's bins + 1 edges in turn
};

// torch.histogram(self, bins, range, weight, density) (aten histogram.bin_ct): self float32,
// any shape and strides, read as a flat list; `range` (optional) holds {min, max}, else the
// data's [min, max] (no data: [0, 1]; a point widened by 0.5 each side); weight (optional)
// float32 with self's number of elements; density divides by the total and the bin widths.
// hist [bins], edges [bins + 1] = linspace(min, max, bins + 1). Elements outside the edges
// and NaN are not counted; the last bin includes its right edge. Weighted sums are atomic
// float adds (their order, hence the last bits, varies). A data range that is not finite
// poisons the stream when the kernels have run.
HistogramOutputs histogram(const Tensor& self, int64_t bins, const std::optional<std::vector<double>>& range,
                           const Tensor* weight, bool density);

// aten _histogramdd_from_bin_cts: self float32 [..., D] (at least 2 dimensions) holds points
// of D coordinates; bins has D counts, range (optional) 2 * D bounds {min0, max0, min1, ...};
// weight (optional) has self's shape without its last dimension. Returns hist [bins...] with
// histogram's rules per coordinate.
std::unique_ptr<Tensor> histogramdd_from_bin_cts(const Tensor& self, const std::vector<int64_t>& bins,
                                                 const std::optional<std::vector<double>>& range,
                                                 const Tensor* weight, bool density);

}  // namespace etm::ops
