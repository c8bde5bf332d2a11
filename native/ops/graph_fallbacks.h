// Fallback ops as device graphs (MPSGraph on Metal, which Apple tunes for its GPUs), as
// PyTorch's MPS backend runs them: each function encodes its op as one graph workload on the
// calling thread's stream and returns true, or returns false, encoding nothing, when the
// runtime runs no graph fallbacks (the CPU device, ETMETAL_FALLBACKS=msl) or an operand has
// a layout the graph does not take; the caller then encodes its MSL kernel. Operands are
// validated by the caller and not empty.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace etm::ops {

// out = alpha * (a @ b) + beta * addend, 2-D or batched 3-D. `addend_strides` are the
// addend's strides broadcast to out as [batch, row, column] (0 where it broadcasts); addend
// is null when beta is 0 or there is none.
bool encode_matmul_graph(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* addend,
                         const int64_t* addend_strides, double alpha, double beta);

// out = conv2d(input, weight) + bias (bias may be null); stride, padding and dilation hold
// (y, x).
bool encode_convolution2d_graph(const Tensor& out, const Tensor& input, const Tensor& weight,
                                const Tensor* bias, const int64_t* stride, const int64_t* padding,
                                const int64_t* dilation, int64_t groups);

}  // namespace etm::ops
