// Parameters of the kernels in shaders/quantized.metal (host side: native/ops/quantized_linear.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct QuantizedMatmulParams {
  int32 M;
  int32 N;
  int32 K;
  int32 group_size;      // K for per-row scales
  int64 a_stride_m;      // elements
  int64 a_stride_k;
  int64 w_stride_n;      // bytes between weight rows
  int64 scale_stride_n;  // elements
  int64 scale_stride_g;
  int64 zero_offset;     // elements from the zeros binding to zero[0, 0]
  int64 zero_stride_n;
  int64 zero_stride_g;
};
ETM_PARAMS_LAYOUT(QuantizedMatmulParams, 80, zero_stride_g, 72);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
