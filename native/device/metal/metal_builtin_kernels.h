// MSL kernels the Metal device itself needs: byte copies and fills whose offsets or lengths
// the blit encoder cannot take on macOS (they must be multiples of 4 there). Plain C++ so
// that tests can compile the same source with the CPU device.
#pragma once

#include <cstdint>

namespace etm::device::metal {

// Argument structs, laid out identically in C++ and MSL (8-byte fields first).
struct ByteCopyArguments {
  uint64_t source_offset;
  uint64_t destination_offset;
  uint64_t length;
};

struct ByteFillArguments {
  uint64_t offset;
  uint64_t length;
  uint32_t value;
};

inline constexpr const char* kCopyBytesKernel = "etm_copy_bytes";
inline constexpr const char* kFillBytesKernel = "etm_fill_bytes";

// Buffers are bound at offset 0 and the byte offsets passed as arguments, because
// setBuffer:offset:atIndex: offsets must be aligned to the accessed type on macOS.
// Each thread strides over the range so that any length fits a bounded grid.
inline constexpr const char* kBuiltinKernelSource = R"MSL(
#include <metal_stdlib>
using namespace metal;

struct ByteCopyArguments {
  ulong source_offset;
  ulong destination_offset;
  ulong length;
};

struct ByteFillArguments {
  ulong offset;
  ulong length;
  uint value;
};

kernel void etm_copy_bytes(device const uchar* source [[buffer(0)]],
                           device uchar* destination [[buffer(1)]],
                           constant ByteCopyArguments& arguments [[buffer(2)]],
                           uint thread_index [[thread_position_in_grid]],
                           uint thread_count [[threads_per_grid]]) {
  for (ulong i = thread_index; i < arguments.length; i += thread_count) {
    destination[arguments.destination_offset + i] = source[arguments.source_offset + i];
  }
}

kernel void etm_fill_bytes(device uchar* destination [[buffer(0)]],
                           constant ByteFillArguments& arguments [[buffer(1)]],
                           uint thread_index [[thread_position_in_grid]],
                           uint thread_count [[threads_per_grid]]) {
  const uchar value = uchar(arguments.value);
  for (ulong i = thread_index; i < arguments.length; i += thread_count) {
    destination[arguments.offset + i] = value;
  }
}
)MSL";

// At most this many threads run a builtin copy or fill; longer ranges loop.
inline constexpr uint64_t kBuiltinMaxThreads = uint64_t{1} << 20;

}  // namespace etm::device::metal
