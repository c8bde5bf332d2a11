// cumprod, cummax / cummin and logcumsumexp as MSL kernels (shaders/cumulative.metal), ATen
// semantics. Inputs on mps with any strides; results are new contiguous tensors of self's
// shape; `dim` may be negative; at most 9 dimensions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "runtime/tensor.h"

namespace etm::ops {

// Result dtype: `dtype` when given, else self's for floating inputs and int64 for integer and
// bool inputs. Floating inputs: float32 results (double-like products, as torch's CPU kernel)
// and float16/bfloat16 results (float32 products); integer and bool inputs: int64/int32 (64-bit
// wrapping products) or float32.
std::unique_ptr<Tensor> cumprod(const Tensor& self, int64_t dim, std::optional<int32_t> dtype);

// Running maximum (or minimum) and the int64 index along `dim` where it was last reached;
// NaN, once seen, stays. Dtypes: floating, signed integer, uint8 and bool.
std::pair<std::unique_ptr<Tensor>, std::unique_ptr<Tensor>> cumulative_extreme(const Tensor& self,
                                                                                int64_t dim, bool max);

// log(cumsum(exp(self))) without overflow, in float32; float32, float16 or bfloat16.
std::unique_ptr<Tensor> logcumsumexp(const Tensor& self, int64_t dim);

}  // namespace etm::ops
