// metal::gather_qmv (kernels in shaders/gather_qmv.metal): per pair p of a mixture-of-experts
// layer, y[p] = x[p] @ dequant(w[indices[p]])^T with 4-bit affine expert weights.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// x [P, K] float32/float16/bfloat16 (any strides), K a multiple of 8; w uint8 [E, N, K / 2];
// scales, biases [E, N, ceil(K / group_size)] in x's dtype; indices int32 or int64 [P];
// group_size 32, 64, 128 or 256. Returns y [P, N] in x's dtype. An index outside [0, E)
// reads no weights and yields a zero row.
std::unique_ptr<Tensor> gather_qmv(const Tensor& x, const Tensor& w, const Tensor& scales,
                                   const Tensor& biases, const Tensor& indices,
                                   int64_t group_size);

}  // namespace etm::ops
