// Advanced indexing (ATen's index.Tensor and index_put_) as MSL kernels (shaders/indexing.metal).
// `indices` has one entry per leading dimension of self, null for "take the whole dimension";
// entries are int64 / int32 index tensors (negative values count from the end) or bool / uint8
// masks, which select like their nonzero() coordinates (this waits for the calling thread's
// stream). Index tensors broadcast together; the result has the broadcast dimensions in place
// of the indexed ones when those are adjacent, first otherwise. self on mps with any strides,
// at most 9 dimensions, results of at most 2^32 - 1 elements. An index out of range poisons the
// stream once the kernels have run.
#pragma once

#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// self[indices], a new contiguous tensor.
std::unique_ptr<Tensor> index(const Tensor& self, const std::vector<const Tensor*>& indices);

// self[indices] = values (or += with `accumulate`, in index order, duplicates adding up), in
// place; values (self's dtype) broadcast to the shape of self[indices].
void index_put_(const Tensor& self, const std::vector<const Tensor*>& indices, const Tensor& values,
                bool accumulate);

}  // namespace etm::ops
