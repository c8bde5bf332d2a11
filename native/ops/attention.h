// Scaled dot-product attention as MSL kernels (shaders/attention.metal), with the semantics of
// ATen's _scaled_dot_product_attention_math_for_mps.
#pragma once

#include <memory>
#include <optional>

#include "runtime/tensor.h"

namespace etm::ops {

struct AttentionOutputs {
  std::unique_ptr<Tensor> output;   // [batch..., heads, rows, value_dim], query dtype
  std::unique_ptr<Tensor> weights;  // [batch..., heads, rows, keys], query dtype: the softmax
  // [batch..., heads, rows], float32: log(sum over keys of exp(score)), score = scale * q.k +
  // mask; -inf for a row that sees no key.
  std::unique_ptr<Tensor> log_sum_exp;
};

// query [batch..., heads, rows, head_dim], key [batch..., kv_heads, keys, head_dim],
// value [batch..., kv_heads, keys, value_dim] (0 to 4 batch dimensions, equal in all three;
// heads a multiple of kv_heads: query head h reads key/value head h / (heads / kv_heads));
// float32, float16 or bfloat16, one dtype; any strides. `mask` (optional) broadcasts to
// [batch..., heads, rows, keys]: bool (true = attend) or additive (the query's dtype or
// float32). `is_causal` lets row i see keys 0..i (top-left aligned, as torch does) and
// excludes a mask. `scale` defaults to 1/sqrt(head_dim). dropout_p must be 0. Rows whose
// keys are all masked get output 0 and weights 0. Work is encoded on the calling thread's
// stream; throws etm::Error for invalid arguments.
AttentionOutputs scaled_dot_product_attention(const Tensor& query, const Tensor& key,
                                              const Tensor& value, const Tensor* mask,
                                              double dropout_p, bool is_causal,
                                              std::optional<double> scale);

struct FusedAttentionOutputs {
  std::unique_ptr<Tensor> output;       // query's shape (last dimension value_dim), its layout
  std::unique_ptr<Tensor> log_sum_exp;  // [batch, heads, rows], float32 (batch 1 for 3-D)
};

// ATen's _scaled_dot_product_fused_attention_overrideable for inference: query 3-D
// [heads, rows, head_dim] or 4-D [batch, heads, rows, head_dim]; the rest as
// scaled_dot_product_attention (attn_bias is its mask). The output's strides follow the
// query's dimension order, as torch's meta function lays it out. dropout_p must be 0.
FusedAttentionOutputs scaled_dot_product_fused_attention(const Tensor& query, const Tensor& key,
                                                         const Tensor& value, const Tensor* attn_bias,
                                                         double dropout_p, bool is_causal,
                                                         std::optional<double> scale);

}  // namespace etm::ops
