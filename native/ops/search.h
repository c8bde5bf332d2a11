// searchsorted and bucketize as MSL kernels (shaders/search.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "runtime/tensor.h"

namespace etm::ops {

// For every element of `values`, its insertion position in `sequence` (sorted along its last
// dimension): the first position whose element is >= the value (`right` false) or > it
// (`right` true). `sequence` is 1-D (shared by every value) or has values' leading dimensions
// (one row per value row). `sorter`, when given, is an int64 tensor of sequence's shape whose
// rows are the permutations that sort the rows (an out-of-range entry poisons the stream).
// `side` ("left"/"right"), when given, overrides `right` and must not contradict it. Result:
// values' shape, int64 (int32 with out_int32). Dtypes: float32, float16, bfloat16, int64,
// int32, int16, int8, uint8; values and sequence are compared in their promoted dtype (a
// mixed pair is converted on the host first, after the stream has finished).
std::unique_ptr<Tensor> searchsorted(const Tensor& sequence, const Tensor& values, bool out_int32,
                                     bool right, const std::optional<std::string>& side,
                                     const Tensor* sorter);

}  // namespace etm::ops
