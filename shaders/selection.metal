// nonzero / nonzero_static, masked_select / masked_scatter and repeat_interleave (ATen semantics): outputs whose rows come
// from a running count, built in three passes so that no thread waits for another:
//   *_chunk_counts   one thread per chunk of kChunk consecutive elements (row-major order):
//                    how many rows the chunk produces;
//   exclusive_scan   one thread: each chunk's first output row, and the total at the end;
//   *_write          one thread per chunk: its rows, from its first row on (rows past the
//                    output's length are dropped).
#include <metal_stdlib>
using namespace metal;
#include "params/selection.h"

template <typename T> inline bool is_nonzero(T v) { return v != T(0); }
template <> inline bool is_nonzero(bool v) { return v; }

template <typename T>
kernel void nonzero_chunk_counts(device const T* input [[buffer(0)]], device long* counts [[buffer(1)]],
                                 constant SelectionParams& p [[buffer(2)]],
                                 uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long count = 0;
  for (uint i = c * p.chunk; i < end; ++i) count += is_nonzero(input[element_offset(i, p.sizes, p.strides, p.dims)]) ? 1 : 0;
  counts[c] = count;
}

// counts[0..chunks) become exclusive prefix sums; counts[chunks] gets the total.
kernel void exclusive_scan(device long* counts [[buffer(0)]], constant SelectionParams& p [[buffer(1)]],
                           uint t [[thread_position_in_grid]]) {
  long running = 0;
  for (uint c = 0; c < p.chunks; ++c) {
    const long count = counts[c];
    counts[c] = running;
    running += count;
  }
  counts[p.chunks] = running;
}

template <typename T>
kernel void nonzero_write(device const T* input [[buffer(0)]], device const long* offsets [[buffer(1)]],
                          device long* out [[buffer(2)]], constant SelectionParams& p [[buffer(3)]],
                          uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long row = offsets[c];
  for (uint i = c * p.chunk; i < end && row < p.rows; ++i) {
    if (!is_nonzero(input[element_offset(i, p.sizes, p.strides, p.dims)])) continue;
    uint index = i;
    for (int d = int(p.dims) - 1; d >= 0; --d) {
      out[row * long(p.dims) + d] = long(index % p.sizes[d]);
      index /= p.sizes[d];
    }
    ++row;
  }
}

// nonzero_static: rows from the count on hold fill_value.
kernel void nonzero_fill(device const long* offsets [[buffer(0)]], device long* out [[buffer(1)]],
                         constant SelectionParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (long(i) / long(p.dims) >= offsets[p.chunks]) out[i] = p.fill_value;
}

// repeat_interleave: chunk counts are sums of repeats; a negative repeat counts as 0 and sets
// `negative` (the host reports it).
template <typename T>
kernel void repeat_chunk_counts(device const T* repeats [[buffer(0)]], device long* counts [[buffer(1)]],
                                device atomic_uint* negative [[buffer(2)]],
                                constant SelectionParams& p [[buffer(3)]],
                                uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long count = 0;
  for (uint i = c * p.chunk; i < end; ++i) {
    const long repeat = long(repeats[element_offset(i, p.sizes, p.strides, p.dims)]);
    if (repeat < 0) atomic_store_explicit(negative, 1u, memory_order_relaxed);
    count += max(repeat, 0L);
  }
  counts[c] = count;
}

template <typename T>
kernel void repeat_write(device const T* repeats [[buffer(0)]], device const long* offsets [[buffer(1)]],
                         device T* out [[buffer(2)]], constant SelectionParams& p [[buffer(3)]],
                         uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long row = offsets[c];
  for (uint i = c * p.chunk; i < end; ++i) {
    const long repeat = long(repeats[element_offset(i, p.sizes, p.strides, p.dims)]);
    for (long k = 0; k < repeat && row < p.rows; ++k) out[row++] = T(i);
  }
}

struct MaskedOffsets {
  long self;
  long mask;
};

inline MaskedOffsets masked_offsets(constant MaskedParams& p, uint index) {
  MaskedOffsets at = {0, 0};
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    const long c = long(index % p.sizes[d]);
    index /= p.sizes[d];
    at.self += c * p.self_strides[d];
    at.mask += c * p.mask_strides[d];
  }
  return at;
}

kernel void masked_chunk_counts(device const bool* mask [[buffer(0)]], device long* counts [[buffer(1)]],
                                constant MaskedParams& p [[buffer(2)]],
                                uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long count = 0;
  for (uint i = c * p.chunk; i < end; ++i) count += mask[masked_offsets(p, i).mask] ? 1 : 0;
  counts[c] = count;
}

template <typename T>
kernel void masked_write(device const T* self [[buffer(0)]], device const bool* mask [[buffer(1)]],
                         device const long* offsets [[buffer(2)]], device T* out [[buffer(3)]],
                         constant MaskedParams& p [[buffer(4)]], uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long row = offsets[c];
  for (uint i = c * p.chunk; i < end && row < p.rows; ++i) {
    const MaskedOffsets at = masked_offsets(p, i);
    if (mask[at.mask]) out[row++] = self[at.self];
  }
}

// masked_scatter: every element of the broadcast shape, from self or, where the mask is true,
// from source's next element (row-major); rows past source's end keep self's value (the host
// reports the shortage).
template <typename T>
kernel void masked_scatter_write(device const T* self [[buffer(0)]], device const bool* mask [[buffer(1)]],
                                 device const long* offsets [[buffer(2)]], device T* out [[buffer(3)]],
                                 device const T* source [[buffer(4)]], constant MaskedParams& p [[buffer(5)]],
                                 constant SelectionParams& s [[buffer(6)]], uint c [[thread_position_in_grid]]) {
  const uint end = min((c + 1) * p.chunk, p.numel);
  long row = offsets[c];
  for (uint i = c * p.chunk; i < end; ++i) {
    const MaskedOffsets at = masked_offsets(p, i);
    const bool from_source = mask[at.mask] && row < long(s.numel);
    out[i] = from_source ? source[element_offset(uint(row), s.sizes, s.strides, s.dims)] : self[at.self];
    if (mask[at.mask]) ++row;
  }
}

#define NONZERO_KERNELS(T, NAME)                                                       \
  template [[host_name("nonzero_chunk_counts_" #NAME)]] [[kernel]]                    \
  decltype(nonzero_chunk_counts<T>) nonzero_chunk_counts<T>;                          \
  template [[host_name("nonzero_write_" #NAME)]] [[kernel]]                           \
  decltype(nonzero_write<T>) nonzero_write<T>;                                        \
  template [[host_name("masked_write_" #NAME)]] [[kernel]]                            \
  decltype(masked_write<T>) masked_write<T>;                                          \
  template [[host_name("masked_scatter_write_" #NAME)]] [[kernel]]                    \
  decltype(masked_scatter_write<T>) masked_scatter_write<T>;

NONZERO_KERNELS(float, float)
NONZERO_KERNELS(half, half)
NONZERO_KERNELS(bfloat, bfloat)
NONZERO_KERNELS(long, long)
NONZERO_KERNELS(int, int)
NONZERO_KERNELS(short, short)
NONZERO_KERNELS(char, char)
NONZERO_KERNELS(uchar, uchar)
NONZERO_KERNELS(bool, bool)

#define REPEAT_KERNELS(T, NAME)                                                        \
  template [[host_name("repeat_chunk_counts_" #NAME)]] [[kernel]]                     \
  decltype(repeat_chunk_counts<T>) repeat_chunk_counts<T>;                            \
  template [[host_name("repeat_write_" #NAME)]] [[kernel]]                            \
  decltype(repeat_write<T>) repeat_write<T>;

REPEAT_KERNELS(long, long)
REPEAT_KERNELS(int, int)
