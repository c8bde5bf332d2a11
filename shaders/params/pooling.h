// Parameters of the kernels in shaders/pooling.metal (host side: native/ops/pooling.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

// Threads of a group of adaptive_pool2d_window (a threadgroup per output).
ETM_PARAMS_CONSTANT uint32 kAdaptiveWindowThreads = 64;

struct PoolParams {
  int64 input_strides[4];  // plane batch, plane channel, h, w
  uint32 channels;         // planes = batch * channels
  uint32 height;
  uint32 width;
  uint32 out_height;
  uint32 out_width;
  int32 window[2];         // kernel size (h, w)
  int32 stride[2];
  int32 padding[2];
  int32 dilation[2];
  int32 divisor;           // avg_pool2d's divisor_override; 0: none
  uint32 count_include_pad;
  uint32 pad;
};
ETM_PARAMS_LAYOUT(PoolParams, 96, pad, 92);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
