// aoti_torch_mps__fused_rms_norm (etmetal/fallback_reductions.h).
#include <optional>
#include <vector>

#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/normalization.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps__fused_rms_norm(AtenTensorHandle input,
                                                         const int64_t* normalized_shape,
                                                         int64_t normalized_shape_len_,
                                                         AtenTensorHandle* weight, double* eps,
                                                         AtenTensorHandle* ret0,
                                                         AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    ETM_REQUIRE(normalized_shape_len_ >= 0 && normalized_shape_len_ <= 64,
                "normalized_shape_len_ ", normalized_shape_len_, " is out of range");
    ETM_REQUIRE(normalized_shape || normalized_shape_len_ == 0, "normalized_shape is null");
    const std::vector<int64_t> shape(normalized_shape, normalized_shape + normalized_shape_len_);
    auto outputs = etm::ops::fused_rms_norm(tensor_of(input), shape,
                                            weight ? &tensor_of(*weight) : nullptr,
                                            eps ? std::optional<double>(*eps) : std::nullopt);
    *ret0 = new_handle(std::move(outputs.output));
    *ret1 = new_handle(std::move(outputs.rstd));
  });
}
