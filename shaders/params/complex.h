// Parameters of the kernels in shaders/complex.metal (host side: native/ops/complex.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kPolarMaxDims = 8;

// The output is walked in memory order: sizes and the operands' strides are in that order.
struct PolarParams {
  int64 abs_strides[kPolarMaxDims];
  int64 angle_strides[kPolarMaxDims];
  uint32 sizes[kPolarMaxDims];
  uint32 dims;
  uint32 unused;
};
ETM_PARAMS_LAYOUT(PolarParams, 168, unused, 164);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
