// polar (ATen semantics): out = abs * (cos(angle), sin(angle)) as complex64 (float2: real,
// imaginary), one thread per output element, operands broadcast (stride 0).
#include <metal_stdlib>
using namespace metal;

#include "params/complex.h"

kernel void polar(const device float* abs [[buffer(0)]], const device float* angle [[buffer(1)]],
                  device float2* out [[buffer(2)]], constant PolarParams& p [[buffer(3)]],
                  uint index [[thread_position_in_grid]]) {
  long abs_at = 0, angle_at = 0;
  uint rest = index;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    const uint coordinate = rest % p.sizes[d];
    rest /= p.sizes[d];
    abs_at += long(coordinate) * p.abs_strides[d];
    angle_at += long(coordinate) * p.angle_strides[d];
  }
  const float radius = abs[abs_at];
  const float theta = angle[angle_at];
  out[index] = float2(radius * precise::cos(theta), radius * precise::sin(theta));
}
