// Parameters of the kernels in shaders/grid_sampler.metal (host side: native/ops/grid_sampler.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct GridSamplerParams {
  int64 input_strides[5];  // n, c, d, h, w
  int64 grid_strides[5];   // n, d, h, w, coordinate
  uint32 channels;
  uint32 in_size[3];       // D, H, W
  uint32 out_size[3];      // D', H', W'
  uint32 nearest;          // interpolation: 0 bilinear, 1 nearest
  uint32 padding_mode;     // 0 zeros, 1 border, 2 reflection
  uint32 align_corners;
};
ETM_PARAMS_LAYOUT(GridSamplerParams, 120, align_corners, 116);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
