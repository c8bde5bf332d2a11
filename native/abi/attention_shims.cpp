// aoti_torch_mps__scaled_dot_product_attention_math_for_mps{,_v2} and
// aoti_torch_mps__scaled_dot_product_fused_attention_overrideable (etmetal/fallback_attention.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_attention.h"
#include "ops/attention.h"
#include "runtime/dtype.h"
#include "runtime/runtime.h"

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

extern "C" AOTITorchError aoti_torch_mps__scaled_dot_product_fused_attention_overrideable(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, AtenTensorHandle* attn_bias,
    double dropout_p, int32_t is_causal, int32_t /*return_debug_mask: torch returns no mask either*/,
    double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2,
    AtenTensorHandle* ret3, int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6, AtenTensorHandle* ret7,
    AtenTensorHandle* ret8) {
  return guarded_encoding(__func__, [&] {
    for (AtenTensorHandle* out : {ret0, ret1, ret6, ret7}) require_out(out, "a tensor output");
    const etm::Tensor& q = tensor_of(query);
    const etm::Tensor& k = tensor_of(key);
    auto outputs = etm::ops::scaled_dot_product_fused_attention(
        q, k, tensor_of(value), attn_bias ? &tensor_of(*attn_bias) : nullptr, dropout_p, is_causal != 0,
        scale ? std::optional<double>(*scale) : std::nullopt);
    // Philox seed and offset: no random numbers are drawn without dropout.
    etm::Runtime& runtime = etm::Runtime::get();
    auto seed = runtime.empty_tensor({}, {}, static_cast<int32_t>(etm::DType::int64));
    auto offset = runtime.empty_tensor({}, {}, static_cast<int32_t>(etm::DType::int64));
    etm::Stream& stream = runtime.current_stream();
    for (const auto* zero : {seed.get(), offset.get()}) {
      stream.fill_buffer(zero->storage->buffer, zero->buffer_offset(), zero->itemsize(), 0);
    }
    *ret0 = new_handle(std::move(outputs.output));
    *ret1 = new_handle(std::move(outputs.log_sum_exp));
    for (AtenTensorHandle* none : {ret2, ret3, ret8}) {
      if (none) *none = nullptr;
    }
    if (ret4) *ret4 = q.sizes[q.dim() - 2];
    if (ret5) *ret5 = k.sizes[k.dim() - 2];
    *ret6 = new_handle(std::move(seed));
    *ret7 = new_handle(std::move(offset));
  });
}
