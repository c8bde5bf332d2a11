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

/* metal::gather_qmv(X, W, S, Z, ExpertIndices, group_size): per pair p,
 * ret[p] = X[p] @ dequant(W[ExpertIndices[p]])^T.
 * X [P, K] float32/float16/bfloat16 (any strides), K a multiple of 8; W uint8 [E, N, K/2]
 * (4-bit, even k in the low nibble); S, Z [E, N, ceil(K/group_size)] in X's dtype,
 * W[e, n, k] = S * q + Z; ExpertIndices int32 or int64 [P]; group_size 32, 64, 128 or 256.
 * ret [P, N] in X's dtype. A pair whose index is outside [0, E) reads no weights and gets a
 * zero row. */
ETMETAL_API AOTITorchError aoti_torch_mps_gather_qmv(AtenTensorHandle X, AtenTensorHandle W,
                                                     AtenTensorHandle S, AtenTensorHandle Z,
                                                     AtenTensorHandle ExpertIndices,
                                                     int64_t group_size, AtenTensorHandle* ret);

/* metal::gated_delta_rule(Q, K, V, G, Beta, State): the gated delta rule over T steps, in one
 * dispatch. Q, K [B, T, Hk, Dk]; V [B, T, Hv, Dv]; G, Beta [B, T, Hv] (G already
 * exponentiated); all float32, float16 or bfloat16 of one dtype, any strides. State
 * [B, Hv, Dv, Dk] in float32 or Q's dtype (then Dk <= 512), updated in place; the recurrence
 * accumulates in float and rounds a 16-bit state once, at the end. Hk divides Hv (value head h reads key head
 * h / (Hv / Hk)); Dk and Dv multiples of 32. Per step t:
 *   S = G_t S;  delta = Beta_t (v_t - S k_t);  S = S + delta k_t^T;  y_t = S q_t.
 * retY [B, T, Hv, Dv] in Q's dtype. */
ETMETAL_API AOTITorchError aoti_torch_mps_gated_delta_rule(AtenTensorHandle Q,
                                                           AtenTensorHandle K,
                                                           AtenTensorHandle V,
                                                           AtenTensorHandle G,
                                                           AtenTensorHandle Beta,
                                                           AtenTensorHandle State,
                                                           AtenTensorHandle* retY);

ETMETAL_END_DECLS

#endif
