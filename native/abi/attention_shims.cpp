// aoti_torch_mps__scaled_dot_product_attention_math_for_mps{,_v2} (etmetal/fallback_attention.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_attention.h"
#include "ops/attention.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

AOTITorchError attention(const char* function, AtenTensorHandle query, AtenTensorHandle key,
                         AtenTensorHandle value, AtenTensorHandle* attn_mask, double dropout_p,
                         int32_t is_causal, double* scale, AtenTensorHandle* ret0,
                         AtenTensorHandle* ret1) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    const etm::Tensor* mask = attn_mask ? &tensor_of(*attn_mask) : nullptr;
    auto outputs = etm::ops::scaled_dot_product_attention(
        tensor_of(query), tensor_of(key), tensor_of(value), mask, dropout_p, is_causal != 0,
        scale ? std::optional<double>(*scale) : std::nullopt);
    *ret0 = new_handle(std::move(outputs.output));
    *ret1 = new_handle(std::move(outputs.weights));
  });
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
    AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal,
    AtenTensorHandle* /*dropout_mask: dropout is rejected, so never read*/, double* scale,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return attention(__func__, query, key, value, attn_mask, dropout_p, is_causal, scale, ret0, ret1);
}

extern "C" AOTITorchError aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
    AtenTensorHandle* attn_mask, double dropout_p, int32_t is_causal,
    AtenTensorHandle* /*dropout_mask*/, double* scale, int32_t /*enable_gqa*/,
    AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return attention(__func__, query, key, value, attn_mask, dropout_p, is_causal, scale, ret0, ret1);
}
