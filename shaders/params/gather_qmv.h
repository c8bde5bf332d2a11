// Parameters of the kernels in shaders/gather_qmv.metal (host side: native/ops/gather_qmv.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct GatherQmvParams {
  int32 P;
  int32 N;
  int32 K;
  int32 E;
  int32 group_size;
  int32 unused;
  int64 x_stride_p;      // elements
  int64 x_stride_k;
  int64 index_stride;
  int64 w_stride_e;      // bytes
  int64 w_stride_n;
  int64 scale_stride_e;  // elements
  int64 scale_stride_n;
  int64 scale_stride_g;
  int64 bias_stride_e;
  int64 bias_stride_n;
  int64 bias_stride_g;
};
ETM_PARAMS_LAYOUT(GatherQmvParams, 112, bias_stride_g, 104);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
