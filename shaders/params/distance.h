// Parameters of the kernels in shaders/distance.metal (host side: native/ops/distance.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kCdistMaxBatchDims = 6;
// A threadgroup of kDistanceSide x kDistanceSide threads computes kDistanceBlock x kDistanceBlock outputs.
ETM_PARAMS_CONSTANT uint32 kDistanceBlock = 64;
ETM_PARAMS_CONSTANT uint32 kDistanceSide = 16;

struct CdistParams {
  int64 x1_batch_strides[kCdistMaxBatchDims];
  int64 x2_batch_strides[kCdistMaxBatchDims];
  int64 x1_strides[2];  // row, column
  int64 x2_strides[2];
  uint32 batch_sizes[kCdistMaxBatchDims];
  uint32 batch_dims;
  uint32 rows1;         // P
  uint32 rows2;         // R
  uint32 columns;       // M
  float p;
  uint32 norm;          // kZero, kOne, kTwo, kInfinity or kGeneral
};
ETM_PARAMS_LAYOUT(CdistParams, 176, norm, 172);

struct PdistParams {
  int64 strides[2];  // row, column
  uint32 rows;       // N
  uint32 columns;    // M
  float p;
  uint32 norm;       // as CdistParams'
};
ETM_PARAMS_LAYOUT(PdistParams, 32, norm, 28);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
