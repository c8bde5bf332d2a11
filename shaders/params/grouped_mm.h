// Parameters of the kernels in shaders/grouped_mm.metal (host side: native/ops/grouped_mm.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

// A threadgroup computes a block of kGroupedMmBlock x kGroupedMmBlock outputs, or of twice that
// along one dimension (kGroupedMmWideBlock), with a simdgroup (32 threads) per 32 x 32 of them.
ETM_PARAMS_CONSTANT uint32 kGroupedMmBlock = 64;
ETM_PARAMS_CONSTANT uint32 kGroupedMmWideBlock = 128;
ETM_PARAMS_CONSTANT uint32 kGroupedMmTileDepth = 32;  // depth of the operand tiles a step stages

struct GroupedMmParams {
  int64 a_strides[3];    // group (0 for a 2-D a), row, depth
  int64 b_strides[3];    // group (0 for a 2-D b), depth, column
  int64 out_strides[3];  // group (0 for a 2-D out), row, column
  uint32 rows;
  uint32 cols;
  uint32 depth;
  uint32 groups;         // offsets, or the batch of two 3-D operands
  uint32 mode;           // kGroupRows, kGroupCols, kGroupDepth or kBatch
  uint32 pad;
};
ETM_PARAMS_LAYOUT(GroupedMmParams, 96, pad, 92);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
