// Element copies between layouts for cat, pad and reshape, by element size (values move as
// bits, so one kernel serves every dtype of that size):
//   pad_copy  one thread per output element. Its coordinates minus the leading padding of each
//             dimension give a source coordinate; outside the source, the padding mode maps it
//             back in (reflect, replicate, circular) or the element gets the fill value
//             (constant). With no padding this is a strided copy; mode fill writes the fill
//             value everywhere (Tensor.fill_).
#include <metal_stdlib>
using namespace metal;
#include "params/shape.h"

// Padding modes; must match etm::ops::PadMode (native/ops/shape.cpp).
constant constexpr uint kConstant = 0;
constant constexpr uint kReflect = 1;
constant constexpr uint kReplicate = 2;
constant constexpr uint kCircular = 3;
constant constexpr uint kFill = 4;  // no source: every element gets the fill value

inline long source_coordinate(long s, long n, uint mode) {
  if (s >= 0 && s < n) return s;
  switch (mode) {
    case kReflect: return s < 0 ? -s : 2 * (n - 1) - s;
    case kReplicate: return s < 0 ? 0 : n - 1;
    case kCircular: return ((s % n) + n) % n;
    default: return -1;
  }
}

template <typename T>
kernel void pad_copy(device T* out [[buffer(0)]], device const T* src [[buffer(1)]],
                     constant PadParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  uint rest = i;
  long dst_offset = 0, src_offset = 0;
  bool inside = p.mode != kFill;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    const long c = long(rest % p.dst_sizes[d]);
    rest /= p.dst_sizes[d];
    dst_offset += c * p.dst_strides[d];
    const long s = inside ? source_coordinate(c - p.before[d], long(p.src_sizes[d]), p.mode) : -1;
    if (s < 0) {
      inside = false;
    } else {
      src_offset += s * p.src_strides[d];
    }
  }
  out[dst_offset] = inside ? src[src_offset] : T(p.fill);
}

#define PAD_COPY_KERNEL(T, BYTES)                                                    \
  template [[host_name("pad_copy_" #BYTES)]] [[kernel]] decltype(pad_copy<T>) pad_copy<T>;

PAD_COPY_KERNEL(uchar, 1)
PAD_COPY_KERNEL(ushort, 2)
PAD_COPY_KERNEL(uint, 4)
PAD_COPY_KERNEL(ulong, 8)
