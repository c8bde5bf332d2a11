// torch._grouped_mm: one matrix product per group, the groups given by `offs` (int32 running
// ends) along the rows of a 2-D a (a [M, K] x b [G, K, N]), the columns of a 2-D b
// (a [G, M, K] x b [K, N]) or the depth of two 2-D operands (a [M, K] x b [K, N] -> [G, M, N]),
// or by the batch of two 3-D operands. Float accumulation.
// A row or column belongs to the first group whose end lies past it, so group g spans
// [clamp(ends[g - 1]), clamp(ends[g])), each end clamped to [previous end, extent]; rows or
// columns past the last end are zeros, as are groups with no depth.
//
// Tiled as matmul_tiled64 (shaders/matmul.metal): a threadgroup computes a block of Rows x
// Columns outputs of one group on simdgroup matrices, a simdgroup per 32 x 32 part (64 x 64:
// four simdgroups; 64 x 128 and 128 x 64, wide along the wider output dimension: eight, which
// read each operand element half as often), staging kTileDepth-deep steps of both operands in
// threadgroup memory. Along a grouped dimension the blocks of each group start at the group's
// first row (column): the host launches enough blocks for any split (ceil(extent / block) +
// groups, the tail past the last end counting as one more group), and each threadgroup finds
// its group by walking the ends; blocks past the last compute nothing.
#include <metal_stdlib>
using namespace metal;
#include "params/grouped_mm.h"

constant constexpr uint kGroupRows = 0, kGroupCols = 1, kGroupDepth = 2, kBatch = 3;
constant constexpr uint kTileDepth = kGroupedMmTileDepth;

// A half-open range of rows, columns or depth.
struct Span {
  long begin;
  long end;
};

// Block `block` (of `size` rows or columns) along a dimension of `extent` grouped by `ends`: its
// group (groups for the tail past the last end) and the part of that group's span it covers;
// past the last block, the tail's group and an empty span.
inline uint locate_block(const device int* ends, uint groups, long extent, uint size, uint block, thread Span& span) {
  long begin = 0;
  for (uint g = 0; g <= groups; ++g) {
    const long end = g < groups ? clamp(long(ends[g]), begin, extent) : extent;
    const uint blocks = uint((end - begin + size - 1) / size);
    if (block < blocks) {
      span.begin = begin + long(block) * size;
      span.end = min(end, span.begin + long(size));
      return g;
    }
    block -= blocks;
    begin = end;
  }
  span.begin = span.end = extent;
  return groups;
}

template <typename T, uint Rows, uint Columns>
kernel void grouped_mm(const device T* a [[buffer(0)]], const device T* b [[buffer(1)]],
                       const device int* offs [[buffer(2)]], device T* out [[buffer(3)]],
                       constant GroupedMmParams& p [[buffer(4)]], threadgroup float* tiles [[threadgroup(0)]],
                       uint3 position [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                       uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  constexpr uint kThreads = Rows * Columns / 32;  // a simdgroup of 32 per 32 x 32 outputs
  // A tile Rows x kTileDepth, then B tile kTileDepth x Columns; the epilogue reuses the memory
  // (sized by the host) for the Rows x Columns results. It is all the threadgroup memory the
  // kernel has: a wide block's results fill Metal's 32 KB.
  threadgroup float* a_tile = tiles;
  threadgroup float* b_tile = tiles + Rows * kTileDepth;

  uint g = position.z;
  Span rows{long(position.y) * Rows, min(long(p.rows), long(position.y + 1) * Rows)};
  Span cols{long(position.x) * Columns, min(long(p.cols), long(position.x + 1) * Columns)};
  Span depth{0, long(p.depth)};
  if (p.mode == kGroupRows || p.mode == kGroupCols) {
    const bool by_rows = p.mode == kGroupRows;
    // One thread walks the ends for the threadgroup and hands on the group, begin and end of the
    // block (their bits, in the tiles' first floats: tiles are first written after a barrier).
    if (tid == 0) {
      Span span{0, 0};
      tiles[0] = as_type<float>(locate_block(offs, p.groups, by_rows ? long(p.rows) : long(p.cols),
                                             by_rows ? Rows : Columns, by_rows ? position.y : position.x, span));
      tiles[1] = as_type<float>(uint(span.begin));
      tiles[2] = as_type<float>(uint(span.end));
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    g = as_type<uint>(tiles[0]);
    const Span span{long(as_type<uint>(tiles[1])), long(as_type<uint>(tiles[2]))};
    if (by_rows) rows = span; else cols = span;
    if (g == p.groups) depth.end = 0;  // the tail past the last end: zeros
  }
  if (p.mode == kGroupDepth) {
    depth.begin = clamp(g == 0 ? 0L : long(offs[g - 1]), 0L, long(p.depth));
    depth.end = clamp(long(offs[g]), depth.begin, long(p.depth));
  }
  const device T* a_group = a + long(g) * p.a_strides[0];
  const device T* b_group = b + long(g) * p.b_strides[0];
  const uint simd_row = (simdgroup / (Columns / 32)) * 32;
  const uint simd_column = (simdgroup % (Columns / 32)) * 32;

  simdgroup_float8x8 accumulators[4][4];
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
  for (long k0 = depth.begin; k0 < depth.end; k0 += kTileDepth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < Rows * kTileDepth; i += kThreads) {
      const long row = rows.begin + i / kTileDepth, k = k0 + i % kTileDepth;
      a_tile[i] = row < rows.end && k < depth.end ? float(a_group[row * p.a_strides[1] + k * p.a_strides[2]]) : 0.0f;
    }
    for (uint i = tid; i < kTileDepth * Columns; i += kThreads) {
      const long k = k0 + i / Columns, column = cols.begin + i % Columns;
      b_tile[i] =
          k < depth.end && column < cols.end ? float(b_group[k * p.b_strides[1] + column * p.b_strides[2]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < kTileDepth; kk += 8) {
      simdgroup_float8x8 a_fragments[4];
      simdgroup_float8x8 b_fragments[4];
      for (uint i = 0; i < 4; ++i) {
        simdgroup_load(a_fragments[i], a_tile, kTileDepth, ulong2(kk, simd_row + 8 * i));
        simdgroup_load(b_fragments[i], b_tile, Columns, ulong2(simd_column + 8 * i, kk));
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
      simdgroup_store(accumulators[i][j], tiles, Columns, ulong2(simd_column + 8 * j, simd_row + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // No depth (an empty group, the tail past the last end): zeros, not the stored accumulators.
  const bool has_depth = depth.begin < depth.end;
  device T* out_group = out + long(g) * p.out_strides[0];
  for (uint i = tid; i < Rows * Columns; i += kThreads) {
    const long row = rows.begin + i / Columns, column = cols.begin + i % Columns;
    if (row < rows.end && column < cols.end) {
      out_group[row * p.out_strides[1] + column * p.out_strides[2]] = T(has_depth ? tiles[i] : 0.0f);
    }
  }
}

#define INSTANTIATE_GROUPED_MM(T, name, ROWS, COLUMNS)                                             \
  template [[host_name("grouped_mm_" #ROWS "x" #COLUMNS "_" #name)]] kernel void                  \
  grouped_mm<T, ROWS, COLUMNS>(const device T*, const device T*, const device int*, device T*,     \
                               constant GroupedMmParams&, threadgroup float*, uint3, uint, uint);
#define INSTANTIATE_GROUPED_MM_BLOCKS(T, name) \
  INSTANTIATE_GROUPED_MM(T, name, 64, 64)      \
  INSTANTIATE_GROUPED_MM(T, name, 64, 128)     \
  INSTANTIATE_GROUPED_MM(T, name, 128, 64)

INSTANTIATE_GROUPED_MM_BLOCKS(float, float)
INSTANTIATE_GROUPED_MM_BLOCKS(half, half)
INSTANTIATE_GROUPED_MM_BLOCKS(bfloat, bfloat)
