// Parameters of the kernels in shaders/normalization.metal (host side: native/ops/normalization.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kNormalizationMaxDims = 8;

// the leading dimensions, columns over the normalized ones (last fastest in both).
struct RmsNormParams {
  int64 input_row_strides[kNormalizationMaxDims];
  int64 input_column_strides[kNormalizationMaxDims];
  int64 weight_column_strides[kNormalizationMaxDims];
  uint32 row_sizes[kNormalizationMaxDims];
  uint32 column_sizes[kNormalizationMaxDims];
  uint32 row_dims;
  uint32 column_dims;
  uint32 rows;
  uint32 columns;
  uint32 has_weight;
  uint32 rows_per_group;
  float eps;
};
ETM_PARAMS_LAYOUT(RmsNormParams, 288, eps, 280);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
