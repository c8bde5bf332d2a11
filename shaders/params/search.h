// Parameters of the kernels in shaders/search.metal (host side: native/ops/search.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kSearchMaxDims = 9;

struct SearchParams {
  int64 value_strides[kSearchMaxDims];
  int64 row_strides[kSearchMaxDims];  // the sequence's strides over the leading dims (0 when 1-D)
  int64 sorter_row_strides[kSearchMaxDims];
  uint32 sizes[kSearchMaxDims];       // the values' sizes
  uint32 dims;
  uint32 right;
  uint32 has_sorter;
  uint32 length;                // elements per row of the sequence
  int64 sequence_stride;        // along the searched (last) dimension
  int64 sorter_stride;
};
ETM_PARAMS_LAYOUT(SearchParams, 288, sorter_stride, 280);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
