/* etmetal's custom ops for AOTInductor on "mps": the C functions that the custom ops'
 * C-shim declarations name (etmetal_py.ops.custom_ops_to_c_shims is generated from this
 * header). torch does not declare these.
 *
 * Each allocates its result (a new handle the caller deletes) and encodes the work on the
 * calling thread's stream; inputs must stay alive until that work has run. Failures also
 * poison the stream (the next etmetal_synchronize reports them). */
#ifndef ETMETAL_CUSTOM_OPS_H
#define ETMETAL_CUSTOM_OPS_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* torchao::_linear_fp_act_{N}bit_weight(A, B, group_size, S, Z) for N = 1..7.
 * A [M, K] float32/float16/bfloat16 (any strides), K a multiple of 8; B uint8 [N, N*K/8]: each
 * row one little-endian bit stream of K N-bit values (value k at bit k*N); S, Z [N,
 * ceil(K/group_size)] in A's dtype; group_size 32, 64, 128 or 256.
 * ret [M, N] = A @ W^T with W[n, k] = S[n, k/group_size] * q[n, k] + Z[n, k/group_size]. */
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_1bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_2bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_3bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_4bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_5bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_6bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);
ETMETAL_API AOTITorchError aoti_torch_mps__linear_fp_act_7bit_weight(
    AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
    AtenTensorHandle Z, AtenTensorHandle* ret);

ETMETAL_END_DECLS

#endif
