// _cdist_forward (ATen semantics): out[b, i, j] = the p-norm of x1[b, i, :] - x2[b, j, :], with
// batch dimensions broadcast (stride 0). _pdist_forward: the same norm for every pair of rows
// i < j of one matrix, packed row by row. p 0 counts the nonzero differences, p infinity takes
// the largest |difference|.
//
// Tiled as a matrix product: a threadgroup of kSide x kSide threads computes a kBlock x kBlock
// block of outputs (each thread kOwn x kOwn of them), staging kChunk features of its kBlock rows
// of each operand in threadgroup memory per step, so every row is read from device memory once
// per block of the other operand instead of once per output. Each output accumulates its
// features in order in float32, as one thread per output did.
#include <metal_stdlib>
using namespace metal;
#include "params/distance.h"

constant constexpr uint kZero = 0;
constant constexpr uint kOne = 1;
constant constexpr uint kTwo = 2;
constant constexpr uint kInfinity = 3;
constant constexpr uint kGeneral = 4;

constant constexpr uint kBlock = kDistanceBlock;
constant constexpr uint kSide = kDistanceSide;
constant constexpr uint kChunk = 32;          // features staged per step
constant constexpr uint kPitch = kChunk + 1;  // staged row pitch: lanes reading consecutive rows hit distinct banks
constant constexpr uint kThreads = kSide * kSide;
constant constexpr uint kOwn = kBlock / kSide;  // outputs per thread along each side

template <uint Norm>
inline float accumulate(float result, float difference, float p) {
  if (Norm == kZero) return result + (difference != 0.0f ? 1.0f : 0.0f);
  if (Norm == kOne) return result + difference;
  if (Norm == kTwo) return result + difference * difference;
  if (Norm == kInfinity) return max(result, difference);
  return result + pow(difference, p);
}

// Adds features [0, chunk) of the staged rows to the thread's kOwn x kOwn results; the norm a
// template argument, so the innermost loop has no branch on it. The general norm's pow is costly:
// it skips the results whose bit in `stored` is clear (rows past the end, pdist's pairs i >= j).
template <uint Norm>
inline void accumulate_chunk(const threadgroup float* tile1, const threadgroup float* tile2, uint chunk, uint2 local,
                             float p, uint stored, thread float* result) {
  for (uint kk = 0; kk < chunk; ++kk) {
    float v1[kOwn], v2[kOwn];
    for (uint a = 0; a < kOwn; ++a) {
      v1[a] = tile1[(local.y + a * kSide) * kPitch + kk];
      v2[a] = tile2[(local.x + a * kSide) * kPitch + kk];
    }
    for (uint a = 0; a < kOwn; ++a) {
      for (uint b = 0; b < kOwn; ++b) {
        if (Norm != kGeneral || (stored >> (kOwn * a + b)) & 1u) {
          result[kOwn * a + b] = accumulate<Norm>(result[kOwn * a + b], fabs(v1[a] - v2[b]), p);
        }
      }
    }
  }
}

inline float finish(float result, uint norm, float p) {
  if (norm == kTwo) return sqrt(result);
  if (norm != kZero && norm != kOne && norm != kInfinity) return pow(result, 1.0f / p);
  return result;
}

// Stages features [k0, k0 + kChunk) of rows [first, first + kBlock) of an operand with `rows`
// rows, element (row, k) at x[row * row_stride + k * column_stride], as float: zeros past the
// last row (their results are not stored) and past the last feature (never read).
template <typename T>
inline void stage(threadgroup float* tile, const device T* x, long row_stride, long column_stride, uint rows,
                  uint first, uint k0, uint columns, uint tid) {
  for (uint i = tid; i < kBlock * kChunk; i += kThreads) {
    const uint row = first + i / kChunk, k = k0 + i % kChunk;
    tile[(i / kChunk) * kPitch + i % kChunk] =
        row < rows && k < columns ? float(x[long(row) * row_stride + long(k) * column_stride]) : 0.0f;
  }
}

// The norms of the block of x1 rows [first1, first1 + kBlock) and x2 rows [first2, ...):
// result[kOwn * a + b] for x1 row first1 + local.y + a * kSide and x2 row first2 + local.x + b *
// kSide; bit kOwn * a + b of `stored` set where that result is stored. `same`: both are the same
// rows of the same matrix (pdist's diagonal), staged once.
template <typename T>
inline void distance_block(threadgroup float* tile1, threadgroup float* tile2, const device T* x1,
                           long row_stride1, long column_stride1, uint rows1, uint first1, const device T* x2,
                           long row_stride2, long column_stride2, uint rows2, uint first2, bool same,
                           uint columns, uint norm, float p, uint2 local, uint tid, uint stored,
                           thread float* result) {
  for (uint i = 0; i < kOwn * kOwn; ++i) result[i] = 0.0f;
  const threadgroup float* staged2 = same ? tile1 : tile2;
  for (uint k0 = 0; k0 < columns; k0 += kChunk) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    stage(tile1, x1, row_stride1, column_stride1, rows1, first1, k0, columns, tid);
    if (!same) stage(tile2, x2, row_stride2, column_stride2, rows2, first2, k0, columns, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint chunk = min(kChunk, columns - k0);
    switch (norm) {
      case kZero: accumulate_chunk<kZero>(tile1, staged2, chunk, local, p, stored, result); break;
      case kOne: accumulate_chunk<kOne>(tile1, staged2, chunk, local, p, stored, result); break;
      case kTwo: accumulate_chunk<kTwo>(tile1, staged2, chunk, local, p, stored, result); break;
      case kInfinity: accumulate_chunk<kInfinity>(tile1, staged2, chunk, local, p, stored, result); break;
      default: accumulate_chunk<kGeneral>(tile1, staged2, chunk, local, p, stored, result);
    }
  }
  for (uint i = 0; i < kOwn * kOwn; ++i) result[i] = finish(result[i], norm, p);
}

// Threadgroup (x, y, batch) computes rows [y * kBlock, ...) of x1 against rows [x * kBlock, ...) of x2.
template <typename T>
kernel void cdist(const device T* x1 [[buffer(0)]], const device T* x2 [[buffer(1)]], device T* out [[buffer(2)]],
                  constant CdistParams& p [[buffer(3)]], uint3 group [[threadgroup_position_in_grid]],
                  uint2 local [[thread_position_in_threadgroup]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile1[kBlock * kPitch];
  threadgroup float tile2[kBlock * kPitch];
  const uint batch = group.z;
  long offset1 = 0, offset2 = 0;
  uint rest = batch;
  for (int d = int(p.batch_dims) - 1; d >= 0; --d) {
    const uint coordinate = rest % p.batch_sizes[d];
    rest /= p.batch_sizes[d];
    offset1 += long(coordinate) * p.x1_batch_strides[d];
    offset2 += long(coordinate) * p.x2_batch_strides[d];
  }
  const uint first1 = group.y * kBlock, first2 = group.x * kBlock;
  uint stored = 0;
  for (uint a = 0; a < kOwn; ++a) {
    for (uint b = 0; b < kOwn; ++b) {
      const uint i = first1 + local.y + a * kSide, j = first2 + local.x + b * kSide;
      stored |= uint(i < p.rows1 && j < p.rows2) << (kOwn * a + b);
    }
  }
  float result[kOwn * kOwn];
  distance_block(tile1, tile2, x1 + offset1, p.x1_strides[0], p.x1_strides[1], p.rows1, first1, x2 + offset2,
                 p.x2_strides[0], p.x2_strides[1], p.rows2, first2, false, p.columns, p.norm, p.p, local, tid,
                 stored, result);
  for (uint a = 0; a < kOwn; ++a) {
    for (uint b = 0; b < kOwn; ++b) {
      const uint i = first1 + local.y + a * kSide, j = first2 + local.x + b * kSide;
      if ((stored >> (kOwn * a + b)) & 1u) out[(long(batch) * p.rows1 + i) * p.rows2 + j] = T(result[kOwn * a + b]);
    }
  }
}

// Threadgroup (x, y) computes the pairs of rows [y * kBlock, ...) with rows [x * kBlock, ...);
// blocks below the diagonal hold no pair i < j and return at once. Pair (i, j) is stored at
// index i * rows - i * (i + 1) / 2 + j - i - 1, as torch packs the upper triangle.
template <typename T>
kernel void pdist(const device T* x [[buffer(0)]], device T* out [[buffer(1)]], constant PdistParams& p [[buffer(2)]],
                  uint2 group [[threadgroup_position_in_grid]], uint2 local [[thread_position_in_threadgroup]],
                  uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float tile1[kBlock * kPitch];
  threadgroup float tile2[kBlock * kPitch];
  if (group.x < group.y) return;
  const uint first1 = group.y * kBlock, first2 = group.x * kBlock;
  uint stored = 0;
  for (uint a = 0; a < kOwn; ++a) {
    for (uint b = 0; b < kOwn; ++b) {
      const uint i = first1 + local.y + a * kSide, j = first2 + local.x + b * kSide;
      stored |= uint(i < j && j < p.rows) << (kOwn * a + b);
    }
  }
  float result[kOwn * kOwn];
  distance_block(tile1, tile2, x, p.strides[0], p.strides[1], p.rows, first1, x, p.strides[0], p.strides[1], p.rows,
                 first2, first1 == first2, p.columns, p.norm, p.p, local, tid, stored, result);
  for (uint a = 0; a < kOwn; ++a) {
    for (uint b = 0; b < kOwn; ++b) {
      const long i = first1 + local.y + a * kSide, j = first2 + local.x + b * kSide;
      if ((stored >> (kOwn * a + b)) & 1u) {
        out[i * long(p.rows) - i * (i + 1) / 2 + j - i - 1] = T(result[kOwn * a + b]);
      }
    }
  }
}

#define INSTANTIATE_CDIST(T)                                                                          \
  template [[host_name("cdist_" #T)]] kernel void cdist<T>(const device T*, const device T*, device T*, \
                                                           constant CdistParams&, uint3, uint2, uint);

INSTANTIATE_CDIST(float)
INSTANTIATE_CDIST(half)
INSTANTIATE_CDIST(bfloat)

#define INSTANTIATE_PDIST(T)                                                                            \
  template [[host_name("pdist_" #T)]] kernel void pdist<T>(const device T*, device T*, constant PdistParams&, \
                                                           uint2, uint2, uint);

INSTANTIATE_PDIST(float)
INSTANTIATE_PDIST(half)
INSTANTIATE_PDIST(bfloat)
