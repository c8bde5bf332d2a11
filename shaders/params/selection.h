// Parameters of the kernels in shaders/selection.metal (host side: native/ops/selection.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kSelectionMaxDims = 9;
// nonzero and the masked ops: threads per threadgroup, each flagging a word of 32 elements,
// and the elements of a threadgroup's block; the threads of the exclusive_scan threadgroup.
ETM_PARAMS_CONSTANT uint32 kSelectionGroupThreads = 256;
ETM_PARAMS_CONSTANT uint32 kSelectionBlock = kSelectionGroupThreads * 32;
ETM_PARAMS_CONSTANT uint32 kSelectionScanThreads = 256;

struct SelectionParams {
  int64 strides[kSelectionMaxDims];  // of the input, in elements
  uint32 sizes[kSelectionMaxDims];
  uint32 dims;
  uint32 numel;
  uint32 chunk;             // elements per chunk (a block, or repeat_interleave's chunk)
  uint32 chunks;
  int64 rows;               // rows of the output (the rest of the rows is dropped)
  int64 fill_value;         // nonzero_static: rows past the count
};
ETM_PARAMS_LAYOUT(SelectionParams, 144, fill_value, 136);

// masked_select: self and mask broadcast to one shape (stride 0 where broadcast).
struct MaskedParams {
  int64 self_strides[kSelectionMaxDims];
  int64 mask_strides[kSelectionMaxDims];
  uint32 sizes[kSelectionMaxDims];
  uint32 dims;
  uint32 numel;
  uint32 chunk;
  uint32 chunks;
  int64 rows;
};
ETM_PARAMS_LAYOUT(MaskedParams, 208, rows, 200);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
