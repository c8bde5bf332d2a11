// Shape and layout ops of c_shim_mps.h: copies (cat, pad, reshape when no view fits) as MSL
// kernels (shaders/shape.metal), views (permute, narrow, slice, squeeze, view as dtype) as
// new sizes, strides and offsets over the same storage. ATen semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// torch.cat: the tensors (same dtype, at most 9 dims) joined along dim into a new contiguous
// tensor. 1-D tensors of size 0 are skipped, as torch does; the others must match in every
// size but dim's.
std::unique_ptr<Tensor> cat(const std::vector<const Tensor*>& tensors, int64_t dim);

// torch.nn.functional.pad: `pad` holds (before, after) pairs from the last dimension backwards.
// mode "constant" (value, default 0; negative pads crop), "reflect", "replicate" or "circular"
// (non-negative pads, on the last 1 to 3 dims of a 2-D to 5-D tensor, as torch allows). A new
// contiguous tensor.
std::unique_ptr<Tensor> pad(const Tensor& self, const std::vector<int64_t>& pad, const std::string& mode,
                            std::optional<double> value);

// torch.reshape: a view when self's strides allow one, else a contiguous copy. One size may
// be -1.
std::unique_ptr<Tensor> reshape(const Tensor& self, const std::vector<int64_t>& shape);

// Tensor.fill_: every element of self (any strides, 1, 2, 4 or 8 bytes) becomes value converted
// to self's dtype.
void fill(const Tensor& self, double value);

// Views.
std::unique_ptr<Tensor> permute(const Tensor& self, const std::vector<int64_t>& dims);
std::unique_ptr<Tensor> narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
// tensor[start:end:step] along dim (None bounds: the whole range; bounds clamp as in Python).
std::unique_ptr<Tensor> slice(const Tensor& self, int64_t dim, std::optional<int64_t> start,
                              std::optional<int64_t> end, int64_t step);
// Removes dim when its size is 1; otherwise the same view.
std::unique_ptr<Tensor> squeeze_dim(const Tensor& self, int64_t dim);
// The same bytes as another dtype; the last dimension scales by the size ratio.
std::unique_ptr<Tensor> view_dtype(const Tensor& self, int32_t dtype);

}  // namespace etm::ops
