// Parameters of the kernels in shaders/scan.metal (host side: native/ops/scan.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kScanMaxDims = 8;

// dimensions (last fastest).
struct ScanParams {
  int64 input_outer[kScanMaxDims];
  int64 output_outer[kScanMaxDims];
  int64 input_stride;  // along the scanned dimension
  int64 output_stride;
  uint32 outer_sizes[kScanMaxDims];
  uint32 outer_dims;
  uint32 length;       // elements per line
  uint32 lines;
  uint32 chunks;       // chunks per line
  uint32 chunk_length;
};
ETM_PARAMS_LAYOUT(ScanParams, 200, chunk_length, 192);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
