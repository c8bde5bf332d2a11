// Factory ops' kernels, ATen semantics. One thread per element.
// hann_window: out[i] = 0.5 - 0.5 * cos(2 pi i / period) (period N for a periodic window, N - 1
//   for a symmetric one; torch's default is periodic), in float32.
// index_cast: randperm's permutation (int64, from sorting random keys) in the requested dtype.
// dropout: out[i] = (self[i] * keep[i]) * scale, in float32 (keep: a bool mask), any strides of self through
//   (sizes, strides) of up to 8 dimensions; out and keep are contiguous.
#include <metal_stdlib>
using namespace metal;
#include "params/factories.h"

template <typename T>
kernel void hann_window(device T* out [[buffer(0)]], constant float& period [[buffer(1)]],
                        uint index [[thread_position_in_grid]]) {
  out[index] = T(0.5f - 0.5f * cos(2.0f * M_PI_F * float(index) / period));
}

template <typename T>
kernel void index_cast(const device long* indices [[buffer(0)]], device T* out [[buffer(1)]],
                       uint index [[thread_position_in_grid]]) {
  out[index] = T(indices[index]);
}

template <typename T>
kernel void dropout(const device T* self [[buffer(0)]], const device bool* keep [[buffer(1)]],
                    device T* out [[buffer(2)]], constant DropoutParams& p [[buffer(3)]],
                    uint index [[thread_position_in_grid]]) {
  const long offset = element_offset(index, p.sizes, p.strides, p.dims);
  out[index] = T(float(self[offset]) * (keep[index] ? 1.0f : 0.0f) * p.scale);  // a dropped NaN stays NaN
}

#define INSTANTIATE_FLOAT_FACTORIES(T)                                                          \
  template [[host_name("hann_window_" #T)]] kernel void hann_window<T>(device T*, constant float&, uint); \
  template [[host_name("dropout_" #T)]] kernel void dropout<T>(const device T*, const device bool*, \
                                                               device T*, constant DropoutParams&, uint);
#define INSTANTIATE_INDEX_CAST(T)                                                               \
  template [[host_name("index_cast_" #T)]] kernel void index_cast<T>(const device long*, device T*, uint);

INSTANTIATE_FLOAT_FACTORIES(float)
INSTANTIATE_FLOAT_FACTORIES(half)
INSTANTIATE_FLOAT_FACTORIES(bfloat)
INSTANTIATE_INDEX_CAST(float)
INSTANTIATE_INDEX_CAST(half)
INSTANTIATE_INDEX_CAST(bfloat)
INSTANTIATE_INDEX_CAST(int)
INSTANTIATE_INDEX_CAST(short)
INSTANTIATE_INDEX_CAST(char)
INSTANTIATE_INDEX_CAST(uchar)
