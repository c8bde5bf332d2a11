// Parameters of the kernels in shaders/random.metal (host side: native/ops/random.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kRandomMaxDims = 9;

struct RandomParams {
  int64 strides[kRandomMaxDims];    // of the output
  int64 p_strides[kRandomMaxDims];  // of bernoulli's probability tensor (when it has one)
  uint32 sizes[kRandomMaxDims];
  uint32 dims;
  uint32 numel;
  uint64 seed;
  uint64 offset;
  int64 low;                  // random_int: the lowest value
  uint64 range;               // random_int: high - low
  float a;                    // from / mean / lambda / p
  float b;                    // to / std
  uint32 has_p_tensor;
};
ETM_PARAMS_LAYOUT(RandomParams, 240, has_p_tensor, 232);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
