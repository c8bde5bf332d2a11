// Host side of the matrix-product fallbacks (shaders/matmul.metal): mm, addmm, bmm, baddbmm
// with ATen semantics, for float32, float16 and bfloat16 operands of any strides and storage
// offsets. Each call validates its operands, then encodes one dispatch on the calling
// thread's stream; nothing waits.
#pragma once

#include "runtime/tensor.h"

namespace etm::ops {

// out = self @ mat2; self [M, K], mat2 [K, N], out [M, N].
void mm_out(const Tensor& out, const Tensor& self, const Tensor& mat2);

// out = beta * self + alpha * (mat1 @ mat2); self broadcasts to out's [M, N]. With
// beta == 0, self is not read (NaN or Inf there does not propagate).
void addmm_out(const Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2,
               double beta, double alpha);

// out[b] = self[b] @ mat2[b]; self [B, M, K], mat2 [B, K, N], out [B, M, N].
void bmm_out(const Tensor& out, const Tensor& self, const Tensor& mat2);

// out[b] = beta * self[b] + alpha * (batch1[b] @ batch2[b]); self broadcasts to [B, M, N].
void baddbmm_out(const Tensor& out, const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                 double beta, double alpha);

}  // namespace etm::ops
