// Where a line-wise op's kernels (sort, top-k, cumulative) find each line, the elements along
// one dimension, of their input and of their values and indices outputs. The first member of
// those ops' parameter structs; the host fills it with lay_out_lines (ops/op_support.h).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

// The line-wise ops handle at most this many dimensions besides the line's.
ETM_PARAMS_CONSTANT int32 kMaxOuterDims = 8;

struct LineLayout {
  int64 input_outer[kMaxOuterDims];  // strides of the other dimensions
  int64 values_outer[kMaxOuterDims];
  int64 indices_outer[kMaxOuterDims];
  int64 input_stride;                // along the line
  int64 values_stride;
  int64 indices_stride;
  uint32 outer_sizes[kMaxOuterDims];
  uint32 outer_dims;
  uint32 length;                     // elements per line
};
ETM_PARAMS_LAYOUT(LineLayout, 256, length, 252);

#ifdef __METAL_VERSION__
struct LineOffsets {
  long input;
  long values;
  long indices;
};

// Element offsets of line `line` (numbered over the other dimensions, last fastest) in the
// input and the outputs.
inline LineOffsets line_offsets(constant LineLayout& layout, uint line) {
  LineOffsets at = {0, 0, 0};
  for (int d = int(layout.outer_dims) - 1; d >= 0; --d) {
    const long coordinate = long(line % layout.outer_sizes[d]);
    line /= layout.outer_sizes[d];
    at.input += coordinate * layout.input_outer[d];
    at.values += coordinate * layout.values_outer[d];
    at.indices += coordinate * layout.indices_outer[d];
  }
  return at;
}
#endif

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
