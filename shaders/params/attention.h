// Parameters and shared constants of the kernels in shaders/attention.metal (host side:
// native/ops/attention.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kSdpaBatchDims = 4;
ETM_PARAMS_CONSTANT uint32 kSdpaBlockThreads = 64;  // threads of an sdpa_block group: two simdgroups
// Threadgroup memory of an sdpa_block group (at most 31.5 KB with its slot state, of the 32 KB
// limit, checked per instance; the sanitizer's guard bytes fit in the rest): the scaled query
// rows of its slots and the scores of a block of keys.
ETM_PARAMS_CONSTANT uint32 kSdpaQueryFloats = 6144;
ETM_PARAMS_CONSTANT uint32 kSdpaTileScores = 1440;
ETM_PARAMS_CONSTANT uint32 kSdpaFinishThreads = 64;  // threads of an sdpa_finish group
ETM_PARAMS_CONSTANT uint32 kSdpaMaxSplits = 64;

// Strides in elements of one tensor: four batch dimensions, then head, row (sequence) and
// column (head dimension, or key for the mask).
struct SdpaStrides {
  int64 batch[kSdpaBatchDims];
  int64 head;
  int64 row;
  int64 column;
};
ETM_PARAMS_LAYOUT(SdpaStrides, 56, column, 48);

struct SdpaParams {
  SdpaStrides q;
  SdpaStrides k;
  SdpaStrides v;
  SdpaStrides mask;
  uint32 batch_sizes[kSdpaBatchDims];
  uint32 heads;          // query heads
  uint32 kv_group;       // query heads per key/value head
  uint32 rows;           // query length
  uint32 keys;           // key/value length
  uint32 head_dim;       // of query and key
  uint32 value_dim;      // of value and output
  uint32 splits;         // key splits per row
  uint32 split_length;   // keys per split
  uint32 causal;         // key j is visible from row i iff j <= i
  uint32 block_heads;    // query heads of one key/value head per sdpa_block group
  uint32 block_rows;     // query rows per sdpa_block group (block_heads * block_rows <= slots)
  uint32 block_keys;     // keys per block (block_keys * block_heads * block_rows <= kSdpaTileScores);
                         // split_length is a multiple
  float scale;
};
ETM_PARAMS_LAYOUT(SdpaParams, 296, scale, 288);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
