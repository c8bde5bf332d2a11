/* Linear-algebra fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names
 * and signatures, ATen semantics (at::triangular_solve, at::cholesky_solve,
 * at::cholesky_inverse, at::lu_unpack). float32 tensors (as torch's MPS backend), any strides,
 * batch dimensions (at most 6) broadcast between the operands of a solve. Each right-hand-side
 * column is solved by substitution on one GPU thread: correct, not fast. A zero on a factor's
 * diagonal gives inf / NaN, as in torch; *ret* outputs are new contiguous tensors (except
 * linalg_solve_triangular's, laid out as torch lays them out).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_LINEAR_ALGEBRA_H
#define ETMETAL_FALLBACK_LINEAR_ALGEBRA_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* Solves A X = self (A^T X = self when transpose != 0) for triangular A [*, n, n] (upper != 0:
 * upper triangular; unitriangular != 0: diagonal taken as 1) and self [*, n, k]: *ret0 X,
 * *ret1 a copy of A broadcast to the batch. */
ETMETAL_API AOTITorchError aoti_torch_mps_triangular_solve(AtenTensorHandle self, AtenTensorHandle A, int32_t upper,
                                                           int32_t transpose, int32_t unitriangular,
                                                           AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* torch.linalg.solve_triangular: *ret0 X with self X = B (left != 0) or X self = B, for triangular
 * self [*, n, n] (upper != 0: upper triangular; unitriangular != 0: diagonal taken as 1) and B
 * [*, n, k] (or [*, k, n]); X has column-major matrices, as torch returns them. Not in torch
 * 2.13's C shims (etmetal_py registers it with Inductor, which calls it with the signature
 * it derives from the op's schema). */
ETMETAL_API AOTITorchError aoti_torch_mps_linalg_solve_triangular(AtenTensorHandle self, AtenTensorHandle B,
                                                                  int32_t upper, int32_t left, int32_t unitriangular,
                                                                  AtenTensorHandle* ret0);

/* Solves (L L^T) X = self, or (U^T U) X = self when upper != 0, for the Cholesky factor input2
 * [*, n, n] and self [*, n, k]: *ret0 X. */
ETMETAL_API AOTITorchError aoti_torch_mps_cholesky_solve(AtenTensorHandle self, AtenTensorHandle input2,
                                                         int32_t upper, AtenTensorHandle* ret0);

/* *ret0: (L L^T)^-1, or (U^T U)^-1 when upper != 0, of the Cholesky factor self [*, n, n]. */
ETMETAL_API AOTITorchError aoti_torch_mps_cholesky_inverse(AtenTensorHandle self, int32_t upper,
                                                           AtenTensorHandle* ret0);

/* P, L, U with A = P L U from lu_factor's LU_data [*, m, n] and its 1-based int32 LU_pivots
 * [*, min(m, n)]: *ret0 P [*, m, m] (unpack_pivots != 0, else an empty [0]), *ret1 L
 * [*, m, min(m, n)] with a unit diagonal and *ret2 U [*, min(m, n), n] (unpack_data != 0, else
 * empty [0] tensors). A pivot outside [1, m] is reported at the next synchronize. */
ETMETAL_API AOTITorchError aoti_torch_mps_lu_unpack(AtenTensorHandle LU_data, AtenTensorHandle LU_pivots,
                                                    int32_t unpack_data, int32_t unpack_pivots,
                                                    AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                                                    AtenTensorHandle* ret2);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_LINEAR_ALGEBRA_H */
