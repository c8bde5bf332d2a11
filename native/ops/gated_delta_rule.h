// metal::gated_delta_rule (kernels in shaders/gated_delta_rule.metal): the gated delta rule
// recurrence over a whole sequence in one dispatch, the state updated in place.
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; one dtype of float32, float16,
// bfloat16; any strides. state [B, Hv, Dv, Dk] float32 or q's dtype (then Dk <= 512), updated
// in place, accumulated in float. Hk divides Hv; Dk and Dv are positive multiples of 32.
// Returns y [B, T, Hv, Dv] in q's dtype.
std::unique_ptr<Tensor> gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& g, const Tensor& beta, Tensor& state);

}  // namespace etm::ops
