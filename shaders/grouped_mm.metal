// torch._grouped_mm: one matrix product per group, the groups given by `offs` (int32 running
// ends) along the rows of a 2-D a (a [M, K] x b [G, K, N]), the columns of a 2-D b
// (a [G, M, K] x b [K, N]) or the depth of two 2-D operands (a [M, K] x b [K, N] -> [G, M, N]),
// or by the batch of two 3-D operands. One thread per output element, float accumulation.
// A row or column belongs to the first group whose end lies past it; rows or columns past the
// last end, and groups with no depth, are zeros.
#include <metal_stdlib>
using namespace metal;
#include "params/grouped_mm.h"

constant constexpr uint kGroupRows = 0, kGroupCols = 1, kGroupDepth = 2, kBatch = 3;

inline uint group_of(const device int* offs, uint groups, uint position) {
  uint g = 0;
  while (g < groups && long(position) >= long(offs[g])) ++g;
  return g;
}

template <typename T>
kernel void grouped_mm(const device T* a [[buffer(0)]], const device T* b [[buffer(1)]],
                       const device int* offs [[buffer(2)]], device T* out [[buffer(3)]],
                       constant GroupedMmParams& p [[buffer(4)]], uint3 position [[thread_position_in_grid]]) {
  const uint col = position.x, row = position.y, z = position.z;
  uint g = z;
  long k_begin = 0, k_end = long(p.depth);
  if (p.mode == kGroupRows) g = group_of(offs, p.groups, row);
  if (p.mode == kGroupCols) g = group_of(offs, p.groups, col);
  if (p.mode == kGroupDepth) {
    k_begin = clamp(z == 0 ? 0L : long(offs[z - 1]), 0L, long(p.depth));
    k_end = clamp(long(offs[z]), k_begin, long(p.depth));
  }
  float sum = 0.0f;
  if (g < p.groups) {
    const device T* a_row = a + long(g) * p.a_strides[0] + long(row) * p.a_strides[1];
    const device T* b_col = b + long(g) * p.b_strides[0] + long(col) * p.b_strides[2];
    for (long k = k_begin; k < k_end; ++k) sum += float(a_row[k * p.a_strides[2]]) * float(b_col[k * p.b_strides[1]]);
  }
  out[long(z) * p.out_strides[0] + long(row) * p.out_strides[1] + long(col) * p.out_strides[2]] = T(sum);
}

#define INSTANTIATE_GROUPED_MM(T, name)                                                            \
  template [[host_name("grouped_mm_" #name)]] kernel void grouped_mm<T>(                          \
      const device T*, const device T*, const device int*, device T*, constant GroupedMmParams&,   \
      uint3);

INSTANTIATE_GROUPED_MM(float, float32)
INSTANTIATE_GROUPED_MM(half, float16)
INSTANTIATE_GROUPED_MM(bfloat, bfloat16)
