// Parameters of the kernels in shaders/histogram.metal (host side: native/ops/histogram.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

ETM_PARAMS_CONSTANT uint32 kHistogramMaxDims = 9;
// histc's range and count kernels: threads per threadgroup, and the most bins a threadgroup
// counts in threadgroup memory (16 KiB of counters).
ETM_PARAMS_CONSTANT uint32 kHistcGroupThreads = 256;
ETM_PARAMS_CONSTANT uint32 kHistcSharedBins = 4096;
// histogram_count_shared: the most bins and edges it holds in threadgroup memory (edges of
// coordinates with one bin add two each beyond the bins).
ETM_PARAMS_CONSTANT uint32 kHistogramSharedBins = 2048;
ETM_PARAMS_CONSTANT uint32 kHistogramSharedEdges = kHistogramSharedBins + 2 * kHistogramMaxDims;

struct HistcParams {
  int64 strides[kHistogramMaxDims];
  uint32 sizes[kHistogramMaxDims];
  uint32 dims;
  uint32 numel;
  uint32 bins;
};
ETM_PARAMS_LAYOUT(HistcParams, 120, bins, 116);

// histogram / histogramdd over `rows` points of `columns` coordinates each: coordinate k of
// row i is at element_offset(i, sizes, strides, dims) + k * column_stride of self. The edges
// of coordinate k are edges[edge_offsets[k] .. edge_offsets[k] + bins[k]]; hist is row-major
// over bins[0..columns).
struct HistogramParams {
  int64 strides[kHistogramMaxDims];
  int64 weight_strides[kHistogramMaxDims];
  int64 column_stride;
  uint32 sizes[kHistogramMaxDims];
  uint32 weight_sizes[kHistogramMaxDims];
  uint32 bins[kHistogramMaxDims];
  uint32 edge_offsets[kHistogramMaxDims];
  float low[kHistogramMaxDims];    // the given range (widened when a point), unless data_range
  float high[kHistogramMaxDims];
  uint32 dims;
  uint32 weight_dims;
  uint32 rows;
  uint32 columns;
  uint32 hist_numel;
  uint32 data_range;      // 1: each coordinate's range is its data's [min, max]
  uint32 weighted;
};
ETM_PARAMS_LAYOUT(HistogramParams, 400, weighted, 392);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
