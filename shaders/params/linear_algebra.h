// Parameters of the kernels in shaders/linear_algebra.metal (host side: native/ops/linear_algebra.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kLinalgMaxBatchDims = 6;

struct SolveParams {
  int64 a_batch_strides[kLinalgMaxBatchDims];
  int64 b_batch_strides[kLinalgMaxBatchDims];
  int64 a_strides[2];  // row, column
  int64 b_strides[2];
  int64 x_strides[2];  // of the solution's rows and columns (its batches are n * k apart)
  uint32 batch_sizes[kLinalgMaxBatchDims];
  uint32 batch_dims;
  uint32 n;
  uint32 k;
  uint32 upper;
  uint32 transpose;
  uint32 unit;
  uint32 identity_rhs;
  uint32 pad;
};
ETM_PARAMS_LAYOUT(SolveParams, 200, pad, 196);

struct LuParams {
  int64 lu_batch_strides[kLinalgMaxBatchDims];
  int64 pivot_batch_strides[kLinalgMaxBatchDims];
  int64 lu_strides[2];
  int64 pivot_stride;
  uint32 batch_sizes[kLinalgMaxBatchDims];
  uint32 batch_dims;
  uint32 m;
  uint32 n;
  uint32 k;  // min(m, n)
};
ETM_PARAMS_LAYOUT(LuParams, 160, k, 156);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
