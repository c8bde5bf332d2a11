// torch._grouped_mm: one matrix product per group, the groups given by `offs` (int32 running
// ends) along the rows of a 2-D a (a [M, K] x b [G, K, N]), the columns of a 2-D b
// (a [G, M, K] x b [K, N]) or the depth of two 2-D operands (a [M, K] x b [K, N] -> [G, M, N]),
// or by the batch of two 3-D operands. Float accumulation.
// A row or column belongs to the first group whose end lies past it, so group g spans
// [clamp(ends[g - 1]), clamp(ends[g])), each end clamped to [previous end, extent]; rows or
// columns past the last end are zeros, as are groups with no depth.
//
// Tiled as matmul_tiled64 (shaders/matmul.metal): a threadgroup of four simdgroups computes a
// kBlock x kBlock block of one group's outputs on simdgroup matrices, staging kTileDepth-deep
// steps of both operands in threadgroup memory. Along a grouped dimension the blocks of each
// group start at the group's first row (column): the host launches enough blocks for any split
// (ceil(extent / kBlock) + groups, the tail past the last end counting as one more group), and
// each threadgroup finds its group by walking the ends; blocks past the last compute nothing.
#include <metal_stdlib>
using namespace metal;
#include "params/grouped_mm.h"

constant constexpr uint kGroupRows = 0, kGroupCols = 1, kGroupDepth = 2, kBatch = 3;
constant constexpr uint kBlock = kGroupedMmBlock;
constant constexpr uint kTileDepth = 32;
constant constexpr uint kThreads = kGroupedMmThreads;

// A half-open range of rows, columns or depth.
struct Span {
  long begin;
  long end;
};

// Block `block` along a dimension of `extent` grouped by `ends`: its group (groups for the tail
// past the last end) and the part of that group's span it covers; past the last block, the
// tail's group and an empty span.
inline uint locate_block(const device int* ends, uint groups, long extent, uint block, thread Span& span) {
  long begin = 0;
  for (uint g = 0; g <= groups; ++g) {
    const long end = g < groups ? clamp(long(ends[g]), begin, extent) : extent;
    const uint blocks = uint((end - begin + kBlock - 1) / kBlock);
    if (block < blocks) {
      span.begin = begin + long(block) * kBlock;
      span.end = min(end, span.begin + long(kBlock));
      return g;
    }
    block -= blocks;
    begin = end;
  }
  span.begin = span.end = extent;
  return groups;
}

template <typename T>
kernel void grouped_mm(const device T* a [[buffer(0)]], const device T* b [[buffer(1)]],
                       const device int* offs [[buffer(2)]], device T* out [[buffer(3)]],
                       constant GroupedMmParams& p [[buffer(4)]], threadgroup float* tiles [[threadgroup(0)]],
                       uint3 position [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                       uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  // A tile kBlock x kTileDepth, then B tile kTileDepth x kBlock; the epilogue reuses the memory
  // (kGroupedMmTileFloats, set by the host) for the kBlock x kBlock results.
  threadgroup float* a_tile = tiles;
  threadgroup float* b_tile = tiles + kBlock * kTileDepth;
  threadgroup uint located[3];  // the group, begin and end of the block along a grouped dimension

  uint g = position.z;
  Span rows{long(position.y) * kBlock, min(long(p.rows), long(position.y + 1) * kBlock)};
  Span cols{long(position.x) * kBlock, min(long(p.cols), long(position.x + 1) * kBlock)};
  Span depth{0, long(p.depth)};
  if (p.mode == kGroupRows || p.mode == kGroupCols) {
    const bool by_rows = p.mode == kGroupRows;
    if (tid == 0) {  // one thread walks the ends for the threadgroup
      Span span{0, 0};
      located[0] = locate_block(offs, p.groups, by_rows ? long(p.rows) : long(p.cols),
                                by_rows ? position.y : position.x, span);
      located[1] = uint(span.begin);
      located[2] = uint(span.end);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    g = located[0];
    const Span span{long(located[1]), long(located[2])};
    if (by_rows) rows = span; else cols = span;
    if (g == p.groups) depth.end = 0;  // the tail past the last end: zeros
  }
  if (p.mode == kGroupDepth) {
    depth.begin = clamp(g == 0 ? 0L : long(offs[g - 1]), 0L, long(p.depth));
    depth.end = clamp(long(offs[g]), depth.begin, long(p.depth));
  }
  const device T* a_group = a + long(g) * p.a_strides[0];
  const device T* b_group = b + long(g) * p.b_strides[0];
  const uint simd_row = (simdgroup / 2) * 32;
  const uint simd_column = (simdgroup % 2) * 32;

  simdgroup_float8x8 accumulators[4][4];
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  for (long k0 = depth.begin; k0 < depth.end; k0 += kTileDepth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < kBlock * kTileDepth; i += kThreads) {
      const long row = rows.begin + i / kTileDepth, k = k0 + i % kTileDepth;
      a_tile[i] = row < rows.end && k < depth.end ? float(a_group[row * p.a_strides[1] + k * p.a_strides[2]]) : 0.0f;
    }
    for (uint i = tid; i < kTileDepth * kBlock; i += kThreads) {
      const long k = k0 + i / kBlock, column = cols.begin + i % kBlock;
      b_tile[i] =
          k < depth.end && column < cols.end ? float(b_group[k * p.b_strides[1] + column * p.b_strides[2]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kTileDepth; kk += 8) {
      simdgroup_float8x8 a_fragments[4];
      simdgroup_float8x8 b_fragments[4];
      for (uint i = 0; i < 4; ++i) {
        simdgroup_load(a_fragments[i], a_tile, kTileDepth, ulong2(kk, simd_row + 8 * i));
        simdgroup_load(b_fragments[i], b_tile, kBlock, ulong2(simd_column + 8 * i, kk));
      }
      for (uint i = 0; i < 4; ++i) {
        for (uint j = 0; j < 4; ++j) {
          simdgroup_multiply_accumulate(accumulators[i][j], a_fragments[i], b_fragments[j], accumulators[i][j]);
        }
      }
    }
  }

  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) {
      simdgroup_store(accumulators[i][j], tiles, kBlock, ulong2(simd_column + 8 * j, simd_row + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // No depth (an empty group, the tail past the last end): zeros, not the stored accumulators.
  const bool has_depth = depth.begin < depth.end;
  device T* out_group = out + long(g) * p.out_strides[0];
  for (uint i = tid; i < kBlock * kBlock; i += kThreads) {
    const long row = rows.begin + i / kBlock, column = cols.begin + i % kBlock;
    if (row < rows.end && column < cols.end) {
      out_group[row * p.out_strides[1] + column * p.out_strides[2]] = T(has_depth ? tiles[i] : 0.0f);
    }
  }
}

#define INSTANTIATE_GROUPED_MM(T, name)                                                            \
  template [[host_name("grouped_mm_" #name)]] kernel void grouped_mm<T>(                          \
      const device T*, const device T*, const device int*, device T*, constant GroupedMmParams&,   \
      threadgroup float*, uint3, uint, uint);

INSTANTIATE_GROUPED_MM(float, float)
INSTANTIATE_GROUPED_MM(half, half)
INSTANTIATE_GROUPED_MM(bfloat, bfloat)
