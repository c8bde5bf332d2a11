/* Attention fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names and
 * signatures, semantics of ATen's _scaled_dot_product_attention_math_for_mps.
 *
 * query [batch..., heads, L, E], key [batch..., kv_heads, S, E], value [batch..., kv_heads,
 * S, Ev]: mps tensors of one dtype (float32, float16, bfloat16) with any strides and storage
 * offsets, 0 to 4 equal batch dimensions, E and Ev in 1..256, heads a multiple of kv_heads
 * (query head h attends with key/value head h / (heads / kv_heads), as repeat_interleave
 * would give; like ATen's MPS kernels this holds with or without enable_gqa).
 * attn_mask (NULL or a pointer to a handle) broadcasts to [batch..., heads, L, S]: bool
 * (true = take part) or additive (the query's dtype, or float32). is_causal lets query row i
 * see keys 0..i (top-left aligned, as torch's is_causal) and excludes attn_mask. scale (NULL
 * for 1/sqrt(E)) multiplies q.k. dropout_p must be 0; dropout_mask is not read.
 * Scores and the softmax are computed in float32 with a numerically stable online softmax.
 *
 * *ret0 receives a new handle to the output [batch..., heads, L, Ev]; *ret1 a new handle to
 * the attention weights softmax(scale * q k^T + mask) [batch..., heads, L, S] (the second
 * result of the ATen op, shaped as its meta function; both contiguous, the query's dtype).
 * A row whose keys are all masked gets output 0 and weights 0 (torch's math backend does the
 * same). The caller deletes both handles. Work is encoded on the calling thread's stream; a
 * failure returns 1, sets etmetal_last_error(), poisons the stream and leaves *ret0 and
 * *ret1 untouched. */
#ifndef ETMETAL_FALLBACK_ATTENTION_H
#define ETMETAL_FALLBACK_ATTENTION_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

ETMETAL_API AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
    AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal,
    AtenTensorHandle* dropout_mask, double* scale, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1);

/* The same with enable_gqa, which changes nothing here (see above). */
ETMETAL_API AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
    AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal,
    AtenTensorHandle* dropout_mask, double* scale, int32_t enable_gqa, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1);

/* _scaled_dot_product_fused_attention_overrideable (the fused SDPA op torch leaves to
 * out-of-tree backends), for inference: query 3-D [heads, rows, head_dim] or 4-D [batch, heads,
 * rows, head_dim], key/value, attn_bias (optional mask: bool, or additive of the query's dtype
 * or float32), is_causal and scale as above. dropout_p must be 0 (torch itself has no kernel
 * for this op, so no reference to follow); return_debug_mask changes nothing. Returns as
 * torch's meta function shapes them: *ret0 the output (query's shape, last dimension value's,
 * strides in the query's dimension order), *ret1 the log-sum-exp of each row's scores
 * [batch, heads, rows] float32 (batch 1 for a 3-D query; -inf where a row sees no key);
 * *ret4 = rows and *ret5 = keys; *ret6, *ret7 (philox seed and offset) 0-D int64 zeros. The
 * outputs torch's meta function leaves None (cum_seq_q, cum_seq_k, debug_attn_mask) get NULL
 * where their pointers are not NULL (AOTInductor passes NULL for them). */
ETMETAL_API AOTITorchError aoti_torch_mps__scaled_dot_product_fused_attention_overrideable(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_bias,
    double dropout_p, int32_t is_causal, int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3, int64_t* ret4, int64_t* ret5,
    AtenTensorHandle* ret6, AtenTensorHandle* ret7, AtenTensorHandle* ret8);

ETMETAL_END_DECLS

#endif
