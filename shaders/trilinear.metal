// _trilinear (ATen semantics): out = the sum over the `sumdim` dimensions of i1 * i2 * i3, each
// input unsqueezed at its expand dimensions and broadcast (stride 0). The host orders the
// dimensions as kept ones (the output's, in order) and summed ones; float32 accumulation.
//   trilinear       one thread per output element, the terms in row-major order of the summed
//                   dimensions (the CPU launch shape, and few terms).
//   trilinear_simd  one simdgroup per output element, lane l summing terms l, l + 32, ... and
//                   simd_sum adding the lanes (the GPU launch shape of many terms: nn.Bilinear
//                   sums in1 x in2 of them, where one thread would walk them all).
#include <metal_stdlib>
using namespace metal;
#include "params/trilinear.h"

// The sum of terms first, first + step, ... of output element `index`.
template <typename T>
inline float sum_terms(const device T* i1, const device T* i2, const device T* i3, constant TrilinearParams& p,
                       uint index, uint first, uint step) {
  long base[3] = {0, 0, 0};
  uint rest = index;
  for (int d = int(p.kept_dims) - 1; d >= 0; --d) {
    const long coordinate = rest % p.kept_sizes[d];
    rest /= p.kept_sizes[d];
    for (int i = 0; i < 3; ++i) base[i] += coordinate * p.kept_strides[i][d];
  }
  uint terms = 1;
  for (uint d = 0; d < p.sum_dims; ++d) terms *= p.sum_sizes[d];
  float sum = 0.0f;
  for (uint term = first; term < terms; term += step) {
    long offset[3] = {base[0], base[1], base[2]};
    uint left = term;
    for (int d = int(p.sum_dims) - 1; d >= 0; --d) {
      const long coordinate = left % p.sum_sizes[d];
      left /= p.sum_sizes[d];
      for (int i = 0; i < 3; ++i) offset[i] += coordinate * p.sum_strides[i][d];
    }
    sum += float(i1[offset[0]]) * float(i2[offset[1]]) * float(i3[offset[2]]);
  }
  return sum;
}

template <typename T>
kernel void trilinear(const device T* i1 [[buffer(0)]], const device T* i2 [[buffer(1)]],
                      const device T* i3 [[buffer(2)]], device T* out [[buffer(3)]],
                      constant TrilinearParams& p [[buffer(4)]], uint index [[thread_position_in_grid]]) {
  out[index] = T(sum_terms(i1, i2, i3, p, index, 0, 1));
}

template <typename T>
kernel void trilinear_simd(const device T* i1 [[buffer(0)]], const device T* i2 [[buffer(1)]],
                           const device T* i3 [[buffer(2)]], device T* out [[buffer(3)]],
                           constant TrilinearParams& p [[buffer(4)]],
                           uint group [[threadgroup_position_in_grid]],
                           uint simdgroup [[simdgroup_index_in_threadgroup]],
                           uint simdgroups [[simdgroups_per_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
  uint outputs = 1;
  for (uint d = 0; d < p.kept_dims; ++d) outputs *= p.kept_sizes[d];
  const uint index = group * simdgroups + simdgroup;
  if (index >= outputs) return;  // the whole simdgroup
  const float sum = simd_sum(sum_terms(i1, i2, i3, p, index, lane, 32));
  if (lane == 0) out[index] = T(sum);
}

#define INSTANTIATE_TRILINEAR(T)                                                                \
  template [[host_name("trilinear_" #T)]] kernel void trilinear<T>(                               \
      const device T*, const device T*, const device T*, device T*, constant TrilinearParams&, uint); \
  template [[host_name("trilinear_simd_" #T)]] kernel void trilinear_simd<T>(                     \
      const device T*, const device T*, const device T*, device T*, constant TrilinearParams&, uint, uint, uint, \
      uint);

INSTANTIATE_TRILINEAR(float)
INSTANTIATE_TRILINEAR(half)
INSTANTIATE_TRILINEAR(bfloat)
