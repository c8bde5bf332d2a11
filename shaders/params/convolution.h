// Parameters of the kernels in shaders/convolution.metal (host side: native/ops/convolution.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct ConvParams {
  int64 batch;
  int64 out_channels;
  int64 in_channels_per_group;
  int64 out_channels_per_group;
  int64 input_sizes[3];     // depth, height, width
  int64 output_sizes[3];
  int64 kernel_sizes[3];
  int64 stride[3];
  int64 padding[3];
  int64 dilation[3];
  int64 input_strides[5];   // batch, channel, depth, height, width
  int64 weight_strides[5];  // dim 0, dim 1, depth, height, width
  int64 output_strides[5];
  int64 bias_stride;
  int32 has_bias;
  int32 reserved;           // keeps the struct's size a multiple of 8 on both sides
};
ETM_PARAMS_LAYOUT(ConvParams, 312, reserved, 308);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
