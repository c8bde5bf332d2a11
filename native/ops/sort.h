// Sort and top-k along one dimension as MSL kernels (shaders/sort.metal), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

struct SortOutputs {
  std::unique_ptr<Tensor> values;   // self's dtype, contiguous
  std::unique_ptr<Tensor> indices;  // int64, contiguous, positions along `dim` in self
};

// Stable sort of `self` (any strides; float, integer or bool dtypes) along `dim` (negative
// counts from the end); NaN sorts after every number (before, when descending).
SortOutputs sort(const Tensor& self, int64_t dim, bool descending);

// Stable sort of `lines` lines of `length` int32 keys each, in [-1, bound), contiguous in
// `keys` (line after line), by an LSD radix sort of ceil(log2(bound + 1) / 11) passes. The
// outputs are laid out the same way: `values` the sorted keys, and `indices` int32 (not
// int64) positions of the keys in their line.
SortOutputs sort_bounded_keys(const Tensor& keys, int64_t lines, int64_t length, int64_t bound);

// The k largest (or smallest) elements along `dim`, always in sorted order (which also
// satisfies sorted=false), ties in input order; NaN counts as the largest value. k <= 256:
// radix selection that reads each line once; larger k sort the lines.
SortOutputs topk(const Tensor& self, int64_t k, int64_t dim, bool largest);

// The k-th smallest element along `dim` (1 <= k <= its size; NaN counts as the largest value)
// and its index, dim kept with size 1 when `keepdim`.
SortOutputs kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim);

// The lower median of all elements as a 0-dim tensor: NaN when there is one (torch.median),
// or, with ignore_nan, the lower median of the numbers (NaN when there are none). Self must
// not be empty.
std::unique_ptr<Tensor> median(const Tensor& self, bool ignore_nan);

}  // namespace etm::ops
