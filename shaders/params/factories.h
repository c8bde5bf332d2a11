// Parameters of the kernels in shaders/factories.metal (host side: native/ops/factories.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kFactoriesMaxDims = 8;

struct DropoutParams {
  int64 strides[kFactoriesMaxDims];
  uint32 sizes[kFactoriesMaxDims];
  uint32 dims;
  float scale;
};
ETM_PARAMS_LAYOUT(DropoutParams, 104, scale, 100);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
