// nonzero / nonzero_static, masked_select / masked_scatter and repeat_interleave as MSL kernels (shaders/selection.metal),
// ATen semantics. Inputs on mps with any strides; at most 9 dimensions and 2^32 - 1 elements.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "runtime/tensor.h"

namespace etm::ops {

// int64 [count, self.dim()] coordinates of the nonzero elements in row-major order (NaN is
// nonzero). The count decides the shape: this waits for the calling thread's stream.
std::unique_ptr<Tensor> nonzero(const Tensor& self);

// nonzero with a fixed number of rows, `size`: the first `size` coordinates, then rows of
// `fill_value`. Does not wait.
std::unique_ptr<Tensor> nonzero_static(const Tensor& self, int64_t size, int64_t fill_value);

// The elements of `self` where the bool `mask` is true, both broadcast to one shape, as a
// 1-D tensor in row-major order. The count decides the length: this waits for the stream.
std::unique_ptr<Tensor> masked_select(const Tensor& self, const Tensor& mask);

// self with the elements where the bool `mask` is true (both broadcast to one shape) replaced,
// in row-major order, by source's elements in row-major order (source: self's dtype, any
// shape). A new contiguous tensor of the broadcast shape. Does not wait: a source with fewer
// elements than the mask has true ones poisons the stream once the kernels have run.
std::unique_ptr<Tensor> masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source);

// For a 1-D int64 or int32 `repeats`, index i repeated repeats[i] times, in repeats' dtype.
// Without `output_size` this waits for the stream (the sum decides the shape) and throws for
// a negative repeat; with it, a negative repeat or a sum other than output_size poisons the
// stream once the kernels have run.
std::unique_ptr<Tensor> repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size);

}  // namespace etm::ops
