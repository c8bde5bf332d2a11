/* Matrix-vector, batch-summed and trilinear products of AOTInductor's Metal shim (torch 2.13
 * c_shim_mps.h), same names and signatures, ATen semantics (at::addmv, at::addbmm on the
 * matrix-product kernels of fallback_matmul.h; at::_trilinear). Operands are float32, float16
 * or bfloat16, one dtype, any strides; products accumulate in float32. With beta 0, self is
 * not read.
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_BLAS_H
#define ETMETAL_FALLBACK_BLAS_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* *ret0: a new [N] = beta * self + alpha * (mat @ vec); mat [N, M], vec [M], self 0-D, [1] or
 * [N]. */
ETMETAL_API AOTITorchError aoti_torch_mps_addmv(AtenTensorHandle self, AtenTensorHandle mat, AtenTensorHandle vec,
                                                double beta, double alpha, AtenTensorHandle* ret0);

/* *ret0: a new [N, P] = beta * self + alpha * sum over b of batch1[b] @ batch2[b]; batch1
 * [B, N, M], batch2 [B, M, P], self broadcasting to [N, P]. */
ETMETAL_API AOTITorchError aoti_torch_mps_addbmm(AtenTensorHandle self, AtenTensorHandle batch1,
                                                 AtenTensorHandle batch2, double beta, double alpha,
                                                 AtenTensorHandle* ret0);

/* The product behind torch.nn.functional.bilinear: i1, i2 and i3, each unsqueezed at its
 * expand dimensions (all reaching one rank, at most 8) and broadcast where a size is 1,
 * multiplied and summed over sumdim; *ret0 is a new contiguous tensor of the other dimensions.
 * unroll_dim (an algorithm choice in ATen) must be in [0, rank). */
ETMETAL_API AOTITorchError aoti_torch_mps__trilinear(AtenTensorHandle i1, AtenTensorHandle i2, AtenTensorHandle i3,
                                                     const int64_t* expand1, int64_t expand1_len_,
                                                     const int64_t* expand2, int64_t expand2_len_,
                                                     const int64_t* expand3, int64_t expand3_len_,
                                                     const int64_t* sumdim, int64_t sumdim_len_, int64_t unroll_dim,
                                                     AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_BLAS_H */
