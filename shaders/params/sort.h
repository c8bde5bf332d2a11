// Parameters of the kernels in shaders/sort.metal (host side: native/ops/sort.cpp).
#pragma once

#include "params/lines.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

struct SortParams {
  LineLayout layout;
  uint32 lines;
  uint32 width;  // run length of a sort_merge pass
  uint32 count;  // elements per line written to the outputs
  uint32 descending;
};
ETM_PARAMS_LAYOUT(SortParams, 272, descending, 268);

// Lines are numbered over the dimensions other than the selected one (last fastest).
struct TopkParams {
  LineLayout layout;       // its length: elements per line of the input
  uint32 lines;
  uint32 k;
  uint32 largest;
  uint32 count;            // elements per line this pass selects from
  uint32 chunk;            // elements per threadgroup of topk_chunks
  uint32 from_candidates;  // this pass reads the previous pass's candidates, not the input
  uint32 source_stride;    // candidates per line in the source buffers
  uint32 target_stride;    // candidates per line in the target buffers
};
ETM_PARAMS_LAYOUT(TopkParams, 288, target_stride, 284);

// The bounded-key radix sort's shape: threads per threadgroup, keys per thread and per block,
// and the widest digit (kRadixMaxBins bins).
ETM_PARAMS_CONSTANT uint32 kRadixGroup = 256;
ETM_PARAMS_CONSTANT uint32 kRadixRounds = 32;
ETM_PARAMS_CONSTANT uint32 kRadixBlock = kRadixGroup * kRadixRounds;
ETM_PARAMS_CONSTANT uint32 kRadixMaxDigitBits = 11;
ETM_PARAMS_CONSTANT uint32 kRadixMaxBins = 1u << kRadixMaxDigitBits;

// One pass of the bounded-key radix sort (radix_count, radix_offsets, radix_scatter).
struct RadixSortParams {
  uint32 length;      // keys per line
  uint32 blocks;      // blocks of kRadixBlock keys per line
  uint32 shift;       // the pass's digit: bits [shift, shift + digit_bits) of key + 1
  uint32 digit_bits;
  uint32 first_pass;  // the positions are the keys' own (no positions buffer yet)
};
ETM_PARAMS_LAYOUT(RadixSortParams, 20, first_pass, 16);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
