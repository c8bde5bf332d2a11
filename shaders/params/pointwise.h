// Parameters of the kernels in shaders/pointwise.metal (host side: native/ops/pointwise.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kPointwiseMaxDims = 8;

// PointwiseParams::math: the arithmetic the kernel does.
ETM_PARAMS_CONSTANT uint32 kFloatMath = 0;
ETM_PARAMS_CONSTANT uint32 kIntegerMath = 1;
ETM_PARAMS_CONSTANT uint32 kComplexMath = 2;

struct PointwiseParams {
  int64 a_strides[kPointwiseMaxDims];
  int64 b_strides[kPointwiseMaxDims];
  int64 alpha_integer;
  int64 scalar_integer;
  uint32 sizes[kPointwiseMaxDims];
  uint32 dims;
  uint32 op;
  uint32 a_dtype;
  uint32 b_dtype;
  uint32 out_dtype;
  uint32 math;  // kFloatMath, kIntegerMath or kComplexMath
  uint32 a_is_scalar;
  uint32 b_is_scalar;
  float alpha_float;
  float scalar_float;
};
ETM_PARAMS_LAYOUT(PointwiseParams, 216, scalar_float, 212);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
