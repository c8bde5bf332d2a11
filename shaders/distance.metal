// _cdist_forward (ATen semantics): out[b, i, j] = the p-norm of x1[b, i, :] - x2[b, j, :], with
// batch dimensions broadcast (stride 0). One thread per output element; float32 accumulation.
// p 0 counts the nonzero differences, p infinity takes the largest |difference|.
#include <metal_stdlib>
using namespace metal;
#include "params/distance.h"

constant constexpr uint kZero = 0;
constant constexpr uint kOne = 1;
constant constexpr uint kTwo = 2;
constant constexpr uint kInfinity = 3;

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
  float result = 0.0f;
  for (uint k = 0; k < p.columns; ++k) {
    const float difference = fabs(float(x1[offset1 + long(k) * p.x1_strides[1]]) -
                                  float(x2[offset2 + long(k) * p.x2_strides[1]]));
    if (p.norm == kZero) {
      result += difference != 0.0f ? 1.0f : 0.0f;
    } else if (p.norm == kOne) {
      result += difference;
    } else if (p.norm == kTwo) {
      result += difference * difference;
    } else if (p.norm == kInfinity) {
      result = max(result, difference);
    } else {
      result += pow(difference, p.p);
    }
  }
  if (p.norm == kTwo) {
    result = sqrt(result);
  } else if (p.norm != kZero && p.norm != kOne && p.norm != kInfinity) {
    result = pow(result, 1.0f / p.p);
  }
  out[(long(batch) * p.rows1 + i) * p.rows2 + j] = T(result);
}

#define INSTANTIATE_CDIST(T)                                                                    \
  template [[host_name("cdist_" #T)]] kernel void cdist<T>(const device T*, const device T*, device T*, \
                                                           constant CdistParams&, uint3);

INSTANTIATE_CDIST(float)
INSTANTIATE_CDIST(half)
INSTANTIATE_CDIST(bfloat)
