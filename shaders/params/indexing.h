// Parameters of the kernels in shaders/indexing.metal (host side: native/ops/indexing.cpp,
// scatter.cpp, embedding_bag.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kIndexingMaxDims = 9;
// Plain coordinates (consecutive) one thread of index_put_accumulate_sorted takes: the run's
// keys and positions are read once for all of them.
ETM_PARAMS_CONSTANT uint32 kSortedPlainRun = 4;
// Sorted keys a thread of the sorted forms' combining kernels takes.
ETM_PARAMS_CONSTANT uint32 kSortedKeyRun = 4;

struct IndexParams {
  int64 plain_self_strides[kIndexingMaxDims];       // self strides of the plain dimensions
  int64 plain_other_strides[kIndexingMaxDims];      // result / values strides of the same dimensions
  int64 broadcast_other_strides[kIndexingMaxDims];
  int64 index_strides[kIndexingMaxDims][kIndexingMaxDims];  // [index k][broadcast dimension j], 0 where broadcast
  int64 indexed_self_strides[kIndexingMaxDims];     // self stride of index k's dimension
  int64 indexed_sizes[kIndexingMaxDims];            // self size of index k's dimension
  uint32 plain_sizes[kIndexingMaxDims];
  uint32 broadcast_sizes[kIndexingMaxDims];
  uint32 plain_dims;
  uint32 broadcast_dims;
  uint32 indices;
  uint32 long_indices;                      // bit k set: index k is int64, else int32
  uint32 broadcast_numel;
  uint32 plain_numel;
};
ETM_PARAMS_LAYOUT(IndexParams, 1104, plain_numel, 1100);

struct ScatterParams {
  int64 out_strides[kIndexingMaxDims];
  int64 index_strides[kIndexingMaxDims];
  int64 src_strides[kIndexingMaxDims];
  int64 count_strides[kIndexingMaxDims];
  uint64 value_bits;            // a scalar src, as the bytes of one T (with scalar_src)
  uint32 line_sizes[kIndexingMaxDims];  // index sizes, 1 along dim
  uint32 dims;
  uint32 dim;
  uint32 length;                // index.size(dim)
  uint32 out_size;              // out.size(dim)
  uint32 reduction;
  uint32 include_self;
  uint32 long_index;
  uint32 scalar_src;
};
ETM_PARAMS_LAYOUT(ScatterParams, 368, scalar_src, 360);

struct EmbeddingBagParams {
  int64 weight_strides[2];
  int64 out_strides[2];
  int64 index_stride;
  int64 offset_stride;
  int64 sample_weight_stride;
  int64 padding_idx;      // negative: none
  uint32 rows;            // of weight
  uint32 features;
  uint32 indices;
  uint32 bags;
  uint32 mode;            // 0 sum, 1 mean, 2 max
  uint32 long_indices;    // indices (and the index outputs) are int64, else int32
  uint32 long_offsets;
  uint32 bag_ends_given;  // include_last_offset: offsets[bags] ends the last bag
  uint32 has_sample_weights;
  uint32 pad;
};
ETM_PARAMS_LAYOUT(EmbeddingBagParams, 104, pad, 100);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
