// What every parameter header in shaders/params/ builds on. A parameter header declares the
// struct an op's host code (native/ops, C++) fills and its kernels (shaders/*.metal, MSL) read,
// once for both: the host includes it as "params/<file>.h"; a shader's `#include
// "params/<file>.h"` is replaced by the header's text when libetmetal hands the shader to a
// device (ops/shader_kernels.cpp), since a device compiles one source string.
//
// Fields use the aliases below, whose sizes are the same on both sides (MSL's long is 64 bits;
// the host's int64_t may be `long long`, so the MSL side names `long` itself). Each struct ends
// with ETM_PARAMS_LAYOUT, which both compilers check.
#pragma once

#ifdef __METAL_VERSION__
// Program-scope constants live in MSL's constant address space.
#define ETM_PARAMS_CONSTANT constant constexpr
typedef long int64;
typedef ulong uint64;
typedef int int32;
typedef uint uint32;
#else
#include <cstdint>
#define ETM_PARAMS_CONSTANT constexpr
namespace etm::ops {
using int64 = int64_t;
using uint64 = uint64_t;
using int32 = int32_t;
using uint32 = uint32_t;
}  // namespace etm::ops
#endif

// The struct's size and the offset of its last member, as both compilers must see them.
#define ETM_PARAMS_LAYOUT(type, size, last_member, last_offset)                     \
  static_assert(sizeof(type) == (size) &&                                           \
                    __builtin_offsetof(type, last_member) == (last_offset),         \
                #type " must have the same layout in C++ and MSL")

#ifdef __METAL_VERSION__
// Offset of element `index` (row-major over `sizes`, last dimension fastest) of a tensor with
// `strides`, in elements.
inline long element_offset(uint index, constant uint* sizes, constant long* strides, uint dims) {
  long offset = 0;
  for (int d = int(dims) - 1; d >= 0; --d) {
    offset += long(index % sizes[d]) * strides[d];
    index /= sizes[d];
  }
  return offset;
}
#endif
