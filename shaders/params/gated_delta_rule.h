// Parameters of the kernels in shaders/gated_delta_rule.metal (host side: native/ops/gated_delta_rule.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct GatedDeltaRuleParams {
  int32 B;
  int32 T;
  int32 Hk;
  int32 Hv;
  int32 Dk;
  int32 Dv;
  int64 q_strides[4];      // elements, [B, T, Hk, Dk]
  int64 k_strides[4];
  int64 v_strides[4];      // [B, T, Hv, Dv]
  int64 g_strides[3];      // [B, T, Hv]
  int64 beta_strides[3];
  int64 state_strides[4];  // [B, Hv, Dv, Dk]
};
ETM_PARAMS_LAYOUT(GatedDeltaRuleParams, 200, state_strides, 168);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
