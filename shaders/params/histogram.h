// Parameters of the kernels in shaders/histogram.metal (host side: native/ops/histogram.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kHistogramMaxDims = 9;

struct HistcParams {
  int64 strides[kHistogramMaxDims];
  uint32 sizes[kHistogramMaxDims];
  uint32 dims;
  uint32 numel;
  uint32 bins;
};
ETM_PARAMS_LAYOUT(HistcParams, 120, bins, 116);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
