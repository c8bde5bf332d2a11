// addmv and addbmm on top of the matrix-product kernels (ops/matmul.h), ATen semantics.
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// beta * self + alpha * (mat @ vec): mat [N, M], vec [M], self broadcasting to [N] (0-D, [1] or
// [N]); a new contiguous [N]. With beta 0, self is not read. float32, float16 or bfloat16, one
// dtype, any strides.
std::unique_ptr<Tensor> addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, double beta, double alpha);

// beta * self + alpha * sum over b of batch1[b] @ batch2[b]: batch1 [B, N, M], batch2 [B, M, P],
// self broadcasting to [N, P]; a new contiguous [N, P] (the batch folds into the inner
// dimension of one product, so products of all batches sum in float32).
std::unique_ptr<Tensor> addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
                               double alpha);

}  // namespace etm::ops
