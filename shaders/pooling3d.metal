// 3-D pooling and max unpooling (ATen semantics). Pooling runs one thread per output element of
// [planes * OD, OH, OW]; the window starts at (o * stride - padding) and skips positions outside
// the input.
// max_pool3d: the window steps by dilation. NaN wins (the last NaN gives the index); the index
//   is the flat position d * H * W + h * W + w in the input plane, the window's first valid
//   position when nothing beats its first value.
// avg_pool3d: the float sum of the window, divided by divisor (when not 0), else by the window's
//   size clipped to the padded input (count_include_pad) or to the input; a window outside the
//   input gives 0.
// max_unpool (2-D and 3-D): one thread per input element; out (zeroed) gets the element at the flat position
//   its index names in its plane. An index outside [0, plane size) is recorded in `fault`
//   (1, value low and high words) and skipped. Unpooling copies bits, so it runs per element size.
#include <metal_stdlib>
using namespace metal;
#include "params/pooling3d.h"

template <typename T>
inline bool beats(T value, T best) {
  return value > best || value != value;  // as ATen's CPU kernel: NaN wins, the last one stays
}

template <typename T>
kernel void max_pool3d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                       device long* indices [[buffer(2)]], constant Pool3dParams& p [[buffer(3)]],
                       uint3 position [[thread_position_in_grid]]) {
  const uint ow = position.x, oh = position.y, plane = position.z / p.out_size[0], od = position.z % p.out_size[0];
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  int start[3] = {int(od) * p.stride[0] - p.padding[0], int(oh) * p.stride[1] - p.padding[1],
                  int(ow) * p.stride[2] - p.padding[2]};
  int end[3];
  for (int i = 0; i < 3; ++i) {
    end[i] = min(start[i] + (p.window[i] - 1) * p.dilation[i] + 1, int(p.in_size[i]));
    while (start[i] < 0) start[i] += p.dilation[i];
  }
  const long plane_h = long(p.in_size[1]) * p.in_size[2];
  long best_index = long(start[0]) * plane_h + long(start[1]) * p.in_size[2] + start[2];
  T best = base[long(start[0]) * p.input_strides[2] + long(start[1]) * p.input_strides[3] +
                long(start[2]) * p.input_strides[4]];
  for (int d = start[0]; d < end[0]; d += p.dilation[0]) {
    for (int h = start[1]; h < end[1]; h += p.dilation[1]) {
      for (int w = start[2]; w < end[2]; w += p.dilation[2]) {
        const T value = base[long(d) * p.input_strides[2] + long(h) * p.input_strides[3] + long(w) * p.input_strides[4]];
        if (beats(value, best)) {
          best = value;
          best_index = long(d) * plane_h + long(h) * p.in_size[2] + w;
        }
      }
    }
  }
  const long out_offset = ((long(position.z) * p.out_size[1]) + oh) * p.out_size[2] + ow;
  out[out_offset] = best;
  indices[out_offset] = best_index;
}

template <typename T>
kernel void avg_pool3d(const device T* input [[buffer(0)]], device T* out [[buffer(1)]],
                       constant Pool3dParams& p [[buffer(2)]], uint3 position [[thread_position_in_grid]]) {
  const uint ow = position.x, oh = position.y, plane = position.z / p.out_size[0], od = position.z % p.out_size[0];
  const device T* base = input + long(plane / p.channels) * p.input_strides[0] +
                         long(plane % p.channels) * p.input_strides[1];
  const int origin[3] = {int(od) * p.stride[0] - p.padding[0], int(oh) * p.stride[1] - p.padding[1],
                         int(ow) * p.stride[2] - p.padding[2]};
  int start[3], end[3];
  int padded_size = 1, size = 1;
  for (int i = 0; i < 3; ++i) {
    end[i] = min(origin[i] + p.window[i], int(p.in_size[i]) + p.padding[i]);
    padded_size *= end[i] - origin[i];
    start[i] = max(origin[i], 0);
    end[i] = min(end[i], int(p.in_size[i]));
    size *= max(end[i] - start[i], 0);
  }
  const long out_offset = ((long(position.z) * p.out_size[1]) + oh) * p.out_size[2] + ow;
  if (size == 0) {
    out[out_offset] = T(0);
    return;
  }
  float sum = 0.0f;
  for (int d = start[0]; d < end[0]; ++d) {
    for (int h = start[1]; h < end[1]; ++h) {
      for (int w = start[2]; w < end[2]; ++w) {
        sum += float(base[long(d) * p.input_strides[2] + long(h) * p.input_strides[3] + long(w) * p.input_strides[4]]);
      }
    }
  }
  const int divisor = p.divisor != 0 ? p.divisor : p.count_include_pad ? padded_size : size;
  out[out_offset] = T(sum / float(divisor));
}

inline void record_fault(device atomic_int* fault, long value) {
  int seen = 0;
  // Claim the record once; a weak exchange may fail spuriously, so retry while unclaimed.
  while (!atomic_compare_exchange_weak_explicit(&fault[0], &seen, 1, memory_order_relaxed, memory_order_relaxed)) {
    if (seen != 0) return;
  }
  atomic_store_explicit(&fault[1], int(uint(ulong(value) & 0xffffffffUL)), memory_order_relaxed);
  atomic_store_explicit(&fault[2], int(uint(ulong(value) >> 32)), memory_order_relaxed);
}

template <typename T>
kernel void max_unpool(const device T* input [[buffer(0)]], const device long* indices [[buffer(1)]],
                       device T* out [[buffer(2)]], device atomic_int* fault [[buffer(3)]],
                       constant UnpoolParams& p [[buffer(4)]], uint3 position [[thread_position_in_grid]]) {
  const uint w = position.x, h = position.y, plane = position.z / p.in_size[0], d = position.z % p.in_size[0];
  const uint n = plane / p.channels, c = plane % p.channels;
  const long index = indices[long(n) * p.indices_strides[0] + long(c) * p.indices_strides[1] +
                             long(d) * p.indices_strides[2] + long(h) * p.indices_strides[3] +
                             long(w) * p.indices_strides[4]];
  if (index < 0 || index >= long(p.out_plane)) {
    record_fault(fault, index);
    return;
  }
  out[long(plane) * p.out_plane + index] = input[long(n) * p.input_strides[0] + long(c) * p.input_strides[1] +
                                                 long(d) * p.input_strides[2] + long(h) * p.input_strides[3] +
                                                 long(w) * p.input_strides[4]];
}

#define INSTANTIATE_MAX_POOL3D(T)                                                               \
  template [[host_name("max_pool3d_" #T)]] kernel void max_pool3d<T>(                             \
      const device T*, device T*, device long*, constant Pool3dParams&, uint3);
#define INSTANTIATE_AVG_POOL3D(T)                                                               \
  template [[host_name("avg_pool3d_" #T)]] kernel void avg_pool3d<T>(                             \
      const device T*, device T*, constant Pool3dParams&, uint3);
#define INSTANTIATE_MAX_UNPOOL(T)                                                               \
  template [[host_name("max_unpool_" #T)]] kernel void max_unpool<T>(                             \
      const device T*, const device long*, device T*, device atomic_int*, constant UnpoolParams&, uint3);

INSTANTIATE_MAX_POOL3D(float)
INSTANTIATE_MAX_POOL3D(half)
INSTANTIATE_MAX_POOL3D(bfloat)
INSTANTIATE_MAX_POOL3D(long)
INSTANTIATE_MAX_POOL3D(int)
INSTANTIATE_MAX_POOL3D(short)
INSTANTIATE_MAX_POOL3D(char)
INSTANTIATE_MAX_POOL3D(uchar)
INSTANTIATE_AVG_POOL3D(float)
INSTANTIATE_AVG_POOL3D(half)
INSTANTIATE_AVG_POOL3D(bfloat)
INSTANTIATE_MAX_UNPOOL(uchar)
INSTANTIATE_MAX_UNPOOL(ushort)
INSTANTIATE_MAX_UNPOOL(uint)
INSTANTIATE_MAX_UNPOOL(ulong)
