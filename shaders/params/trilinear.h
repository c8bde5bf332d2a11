// Parameters of the kernels in shaders/trilinear.metal (host side: native/ops/trilinear.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kTrilinearMaxDims = 8;

struct TrilinearParams {
  int64 kept_strides[3][kTrilinearMaxDims];
  int64 sum_strides[3][kTrilinearMaxDims];
  uint32 kept_sizes[kTrilinearMaxDims];
  uint32 sum_sizes[kTrilinearMaxDims];
  uint32 kept_dims;
  uint32 sum_dims;
};
ETM_PARAMS_LAYOUT(TrilinearParams, 456, sum_dims, 452);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
