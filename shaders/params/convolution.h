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
  // Forward kernels: output channel in group, input channel in group, depth, height, width
  // (transposed problems run as forward ones with the weight's first two strides swapped);
  // convolution_transposed: the weight's own order, input channel first.
  int64 weight_strides[5];
  int64 weight_group_stride;  // from one group's weights to the next
  // Forward kernels: the element of the bound weight that tap (0, 0, 0) of channels (0, 0) reads
  // (a transposed problem's phase walks its taps backwards from there, with negative strides;
  // the weight stays bound from its first element, so no read falls before its binding).
  int64 weight_offset;
  int64 output_strides[5];
  int64 bias_stride;
  int32 has_bias;
};
ETM_PARAMS_LAYOUT(ConvParams, 328, has_bias, 320);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
