// Parameters of the kernels in shaders/pooling3d.metal (host side: native/ops/pooling3d.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct Pool3dParams {
  int64 input_strides[5];  // batch, channel, d, h, w
  uint32 channels;         // planes = batch * channels
  uint32 in_size[3];       // D, H, W
  uint32 out_size[3];
  int32 window[3];
  int32 stride[3];
  int32 padding[3];
  int32 dilation[3];
  int32 divisor;           // avg_pool3d's divisor_override; 0: none
  uint32 count_include_pad;
  uint32 pad;
};
ETM_PARAMS_LAYOUT(Pool3dParams, 128, pad, 124);

struct UnpoolParams {
  int64 input_strides[5];  // batch, channel, d, h, w (a 2-D plane has D 1)
  int64 indices_strides[5];
  uint32 channels;
  uint32 in_size[3];       // D, H, W
  uint32 out_plane;        // output elements per plane
  uint32 pad;
};
ETM_PARAMS_LAYOUT(UnpoolParams, 104, pad, 100);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
