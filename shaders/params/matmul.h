// Parameters of the kernels in shaders/matmul.metal (host side: native/ops/matmul.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct MatmulParams {
  int64 batch;
  int64 rows;               // M
  int64 columns;            // N
  int64 depth;              // K
  int64 a_strides[3];       // batch, row, depth
  int64 b_strides[3];       // batch, depth, column
  int64 out_strides[3];     // batch, row, column
  int64 addend_strides[3];  // batch, row, column; 0 along broadcast dimensions
  float alpha;
  float beta;
  int32 has_addend;
  int32 padding;
};
ETM_PARAMS_LAYOUT(MatmulParams, 144, padding, 140);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
