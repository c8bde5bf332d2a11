/* Matrix-product fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names
 * and signatures, ATen semantics.
 *
 * Operands are float32, float16 or bfloat16 tensors on device mps, all of one dtype, with any
 * strides and storage offsets (transposed and sliced views included); products accumulate in
 * float32. `out` is preallocated by the caller with the result's exact shape and any
 * non-overlapping strides; it must not overlap the matrix operands (it may be `self` itself).
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_MATMUL_H
#define ETMETAL_FALLBACK_MATMUL_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* out[M, N] = self[M, K] @ mat2[K, N]. K == 0 gives zeros. */
ETMETAL_API AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                 AtenTensorHandle mat2);

/* out[M, N] = beta * self + alpha * (mat1[M, K] @ mat2[K, N]); self broadcasts to [M, N].
 * With beta == 0 self is not read, so NaN or Inf in it does not reach out. */
ETMETAL_API AOTITorchError aoti_torch_mps_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                    AtenTensorHandle mat1, AtenTensorHandle mat2,
                                                    double beta, double alpha);

/* out[B, M, N] = self[B, M, K] @ mat2[B, K, N], batch by batch. */
ETMETAL_API AOTITorchError aoti_torch_mps_bmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                  AtenTensorHandle mat2);

/* out[B, M, N] = beta * self + alpha * (batch1[B, M, K] @ batch2[B, K, N]); self broadcasts to
 * [B, M, N] and is not read when beta == 0. */
ETMETAL_API AOTITorchError aoti_torch_mps_baddbmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                      AtenTensorHandle batch1,
                                                      AtenTensorHandle batch2, double beta,
                                                      double alpha);

/* torch._grouped_mm into a new contiguous *ret0: one product per group. self and mat2 float32,
 * float16 or bfloat16 (one dtype), 2-D or 3-D, any strides. *offs (int32, 1-D, running group
 * ends) is required when either is 2-D, refused when both are 3-D: self [M, K] x mat2
 * [G, K, N] -> [M, N] (groups of rows), self [G, M, K] x mat2 [K, N] -> [M, N] (of columns),
 * self [M, K] x mat2 [K, N] -> [G, M, N] (of the depth); self [G, M, K] x mat2 [G, K, N] ->
 * [G, M, N]. Rows or columns past the last end are zeros. bias must be NULL (or point to NULL)
 * and *out_dtype, when given, self's dtype, as in ATen. */
ETMETAL_API AOTITorchError aoti_torch_mps__grouped_mm(AtenTensorHandle self, AtenTensorHandle mat2,
                                                      AtenTensorHandle* offs, AtenTensorHandle* bias,
                                                      int32_t* out_dtype, AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_MATMUL_H */
