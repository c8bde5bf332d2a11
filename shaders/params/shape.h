// Parameters of the kernels in shaders/shape.metal (host side: native/ops/shape.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kShapeMaxDims = 9;

struct PadParams {
  int64 src_strides[kShapeMaxDims];
  int64 dst_strides[kShapeMaxDims];
  int64 before[kShapeMaxDims];  // padding before each dimension (negative: cropped)
  uint32 src_sizes[kShapeMaxDims];
  uint32 dst_sizes[kShapeMaxDims];
  uint64 fill;             // the fill value's bits, in the low bytes
  uint32 dims;
  uint32 numel;
  uint32 mode;
};
ETM_PARAMS_LAYOUT(PadParams, 312, mode, 304);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
