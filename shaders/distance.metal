// _cdist_forward (ATen semantics): out[b, i, j] = the p-norm of x1[b, i, :] - x2[b, j, :], with
// batch dimensions broadcast (stride 0). _pdist_forward: the same norm for every pair of rows
// i < j of one matrix, packed row by row. One thread per output element; float32 accumulation.
// p 0 counts the nonzero differences, p infinity takes the largest |difference|.
#include <metal_stdlib>
using namespace metal;
#include "params/distance.h"

constant constexpr uint kZero = 0;
constant constexpr uint kOne = 1;
constant constexpr uint kTwo = 2;
constant constexpr uint kInfinity = 3;

// The p-norm of x1[offset1 + k * stride1] - x2[offset2 + k * stride2] over k < columns.
template <typename T>
inline float distance(const device T* x1, long offset1, long stride1, const device T* x2, long offset2,
                      long stride2, uint columns, uint norm, float p) {
  float result = 0.0f;
  for (uint k = 0; k < columns; ++k) {
    const float difference = fabs(float(x1[offset1 + long(k) * stride1]) - float(x2[offset2 + long(k) * stride2]));
    if (norm == kZero) {
      result += difference != 0.0f ? 1.0f : 0.0f;
    } else if (norm == kOne) {
      result += difference;
    } else if (norm == kTwo) {
      result += difference * difference;
    } else if (norm == kInfinity) {
      result = max(result, difference);
    } else {
      result += pow(difference, p);
    }
  }
  if (norm == kTwo) return sqrt(result);
  if (norm != kZero && norm != kOne && norm != kInfinity) return pow(result, 1.0f / p);
  return result;
}

template <typename T>
kernel void cdist(const device T* x1 [[buffer(0)]], const device T* x2 [[buffer(1)]], device T* out [[buffer(2)]],
                  constant CdistParams& p [[buffer(3)]], uint3 position [[thread_position_in_grid]]) {
  const uint j = position.x, i = position.y, batch = position.z;
  long offset1 = long(i) * p.x1_strides[0], offset2 = long(j) * p.x2_strides[0];
  uint rest = batch;
  for (int d = int(p.batch_dims) - 1; d >= 0; --d) {
    const uint coordinate = rest % p.batch_sizes[d];
    rest /= p.batch_sizes[d];
    offset1 += long(coordinate) * p.x1_batch_strides[d];
    offset2 += long(coordinate) * p.x2_batch_strides[d];
  }
  out[(long(batch) * p.rows1 + i) * p.rows2 + j] =
      T(distance(x1, offset1, p.x1_strides[1], x2, offset2, p.x2_strides[1], p.columns, p.norm, p.p));
}

// Thread (j, i) of a rows x rows grid computes pair i < j (the others have none), stored at
// index i * rows - i * (i + 1) / 2 + j - i - 1, as torch packs the upper triangle.
template <typename T>
kernel void pdist(const device T* x [[buffer(0)]], device T* out [[buffer(1)]], constant PdistParams& p [[buffer(2)]],
                  uint2 position [[thread_position_in_grid]]) {
  const long j = position.x, i = position.y;
  if (j <= i) return;
  out[i * long(p.rows) - i * (i + 1) / 2 + j - i - 1] =
      T(distance(x, i * p.strides[0], p.strides[1], x, j * p.strides[0], p.strides[1], p.columns, p.norm, p.p));
}

#define INSTANTIATE_CDIST(T)                                                                    \
  template [[host_name("cdist_" #T)]] kernel void cdist<T>(const device T*, const device T*, device T*, \
                                                           constant CdistParams&, uint3);

INSTANTIATE_CDIST(float)
INSTANTIATE_CDIST(half)
INSTANTIATE_CDIST(bfloat)

#define INSTANTIATE_PDIST(T) \
  template [[host_name("pdist_" #T)]] kernel void pdist<T>(const device T*, device T*, constant PdistParams&, uint2);

INSTANTIATE_PDIST(float)
INSTANTIATE_PDIST(half)
INSTANTIATE_PDIST(bfloat)
