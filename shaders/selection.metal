// nonzero / nonzero_static, masked_select / masked_scatter and repeat_interleave (ATen semantics): outputs whose rows come
// from a running count, built in passes so that no thread waits for another group.
// nonzero and the masked ops work in blocks of kSelectionBlock consecutive elements (row-major
// order), one threadgroup of kSelectionGroupThreads per block, one 32-element word a thread:
//   *_chunk_counts   each thread flags its word's elements in the bits of one uint (set: the
//                    element produces a row) and stores it; the block's count of set bits;
//   exclusive_scan   one threadgroup: each block's first output row, and the total at the end;
//   *_write          each thread reads its word again (never the input's flags), finds the set
//                    bits of the words before it in the block (a scan in threadgroup memory)
//                    and writes its rows from the block's first row on (rows past the
//                    output's length are dropped).
// The write kernels repeat that scan in their bodies: the CPU device runs a kernel whose
// barriers sit in a helper function on fibers, far slower than its barrier regions.
// repeat_interleave counts and writes with one thread per chunk of p.chunk repeats (a chunk's
// rows are the sum of its repeats).
#include <metal_stdlib>
using namespace metal;
#include "params/selection.h"

template <typename T> inline bool is_nonzero(T v) { return v != T(0); }
template <> inline bool is_nonzero(bool v) { return v; }

constant constexpr uint kWordBits = 32;

// The flags word of thread t of block `block` covers elements [first_element, + 32).
inline ulong first_element(uint block, uint t) { return (ulong(block) * kSelectionGroupThreads + t) * kWordBits; }

template <typename T>
kernel void nonzero_chunk_counts(device const T* input [[buffer(0)]], device long* counts [[buffer(1)]],
                                 device uint* words [[buffer(2)]], constant SelectionParams& p [[buffer(3)]],
                                 uint block [[threadgroup_position_in_grid]],
                                 uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint set_bits[kSelectionGroupThreads];
  const ulong begin = first_element(block, t);
  uint bits = 0;
  for (uint j = 0; j < kWordBits && begin + j < p.numel; ++j) {
    if (is_nonzero(input[element_offset(uint(begin + j), p.sizes, p.strides, p.dims)])) bits |= 1u << j;
  }
  if (begin < p.numel) words[begin / kWordBits] = bits;
  set_bits[t] = popcount(bits);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t != 0) return;
  long total = 0;
  for (uint i = 0; i < kSelectionGroupThreads; ++i) total += set_bits[i];
  counts[block] = total;
}

// counts[0..chunks) become exclusive prefix sums; counts[chunks] gets the total. One
// threadgroup of kSelectionScanThreads, in tiles of kScanValues counts a thread: each thread
// sums its counts, the threadgroup scans the sums (Hillis-Steele in threadgroup memory), and
// the tiles before carry over.
constant constexpr uint kScanValues = 4;
constant constexpr uint kScanTile = kSelectionScanThreads * kScanValues;

kernel void exclusive_scan(device long* counts [[buffer(0)]], constant SelectionParams& p [[buffer(1)]],
                           uint t [[thread_index_in_threadgroup]]) {
  threadgroup long sums[kSelectionScanThreads];
  long carry = 0;
  for (uint tile = 0; tile < p.chunks; tile += kScanTile) {
    long values[kScanValues];
    long sum = 0;
    for (uint j = 0; j < kScanValues; ++j) {
      const uint c = tile + t * kScanValues + j;
      values[j] = c < p.chunks ? counts[c] : 0;
      sum += values[j];
    }
    sums[t] = sum;
    for (uint span = 1; span < kSelectionScanThreads; span *= 2) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      const long before = t >= span ? sums[t - span] : 0;
      threadgroup_barrier(mem_flags::mem_threadgroup);
      sums[t] += before;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    long running = carry + sums[t] - sum;
    for (uint j = 0; j < kScanValues; ++j) {
      const uint c = tile + t * kScanValues + j;
      if (c < p.chunks) counts[c] = running;
      running += values[j];
    }
    carry += sums[kSelectionScanThreads - 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (t == 0) counts[p.chunks] = carry;
}

kernel void nonzero_write(device const uint* words [[buffer(0)]], device const long* offsets [[buffer(1)]],
                          device long* out [[buffer(2)]], constant SelectionParams& p [[buffer(3)]],
                          uint block [[threadgroup_position_in_grid]],
                          uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint before[kSelectionGroupThreads];
  threadgroup long block_row;
  const ulong begin = first_element(block, t);
  uint bits = begin < p.numel ? words[begin / kWordBits] : 0u;
  before[t] = popcount(bits);
  if (t == 0) block_row = offsets[block];
  for (uint span = 1; span < kSelectionGroupThreads; span *= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint earlier = t >= span ? before[t - span] : 0u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    before[t] += earlier;
  }
  long row = block_row + long(before[t]) - long(popcount(bits));
  for (; bits != 0 && row < p.rows; bits &= bits - 1u, ++row) {
    uint index = uint(begin) + ctz(bits);
    for (int d = int(p.dims) - 1; d >= 0; --d) {
      out[row * long(p.dims) + d] = long(index % p.sizes[d]);
      index /= p.sizes[d];
    }
  }
}

// nonzero_static: rows from the count on hold fill_value (the count read once a threadgroup).
kernel void nonzero_fill(device const long* offsets [[buffer(0)]], device long* out [[buffer(1)]],
                         constant SelectionParams& p [[buffer(2)]], uint i [[thread_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]]) {
  threadgroup long count;
  if (t == 0) count = offsets[p.chunks];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (long(i) / long(p.dims) >= count) out[i] = p.fill_value;
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
                                device uint* words [[buffer(2)]], constant MaskedParams& p [[buffer(3)]],
                                uint block [[threadgroup_position_in_grid]],
                                uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint set_bits[kSelectionGroupThreads];
  const ulong begin = first_element(block, t);
  uint bits = 0;
  for (uint j = 0; j < kWordBits && begin + j < p.numel; ++j) {
    if (mask[masked_offsets(p, uint(begin + j)).mask]) bits |= 1u << j;
  }
  if (begin < p.numel) words[begin / kWordBits] = bits;
  set_bits[t] = popcount(bits);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t != 0) return;
  long total = 0;
  for (uint i = 0; i < kSelectionGroupThreads; ++i) total += set_bits[i];
  counts[block] = total;
}

template <typename T>
kernel void masked_write(device const T* self [[buffer(0)]], device const uint* words [[buffer(1)]],
                         device const long* offsets [[buffer(2)]], device T* out [[buffer(3)]],
                         constant MaskedParams& p [[buffer(4)]],
                         uint block [[threadgroup_position_in_grid]],
                         uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint before[kSelectionGroupThreads];
  threadgroup long block_row;
  const ulong begin = first_element(block, t);
  uint bits = begin < p.numel ? words[begin / kWordBits] : 0u;
  before[t] = popcount(bits);
  if (t == 0) block_row = offsets[block];
  for (uint span = 1; span < kSelectionGroupThreads; span *= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint earlier = t >= span ? before[t - span] : 0u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    before[t] += earlier;
  }
  long row = block_row + long(before[t]) - long(popcount(bits));
  for (; bits != 0 && row < p.rows; bits &= bits - 1u, ++row) {
    out[row] = self[masked_offsets(p, uint(begin) + ctz(bits)).self];
  }
}

// masked_scatter: every element of the broadcast shape, from self or, where the mask is true,
// from source's next element (row-major); rows past source's end keep self's value (the host
// reports the shortage).
template <typename T>
kernel void masked_scatter_write(device const T* self [[buffer(0)]], device const uint* words [[buffer(1)]],
                                 device const long* offsets [[buffer(2)]], device T* out [[buffer(3)]],
                                 device const T* source [[buffer(4)]], constant MaskedParams& p [[buffer(5)]],
                                 constant SelectionParams& s [[buffer(6)]],
                                 uint block [[threadgroup_position_in_grid]],
                                 uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint before[kSelectionGroupThreads];
  threadgroup long block_row;
  const ulong begin = first_element(block, t);
  const uint bits = begin < p.numel ? words[begin / kWordBits] : 0u;
  before[t] = popcount(bits);
  if (t == 0) block_row = offsets[block];
  for (uint span = 1; span < kSelectionGroupThreads; span *= 2) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint earlier = t >= span ? before[t - span] : 0u;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    before[t] += earlier;
  }
  long row = block_row + long(before[t]) - long(popcount(bits));
  for (uint j = 0; j < kWordBits && begin + j < p.numel; ++j) {
    const uint i = uint(begin) + j;
    if (((bits >> j) & 1u) != 0 && row < long(s.numel)) {
      out[i] = source[element_offset(uint(row), s.sizes, s.strides, s.dims)];
    } else {
      out[i] = self[masked_offsets(p, i).self];
    }
    row += (bits >> j) & 1u;
  }
}

#define NONZERO_KERNELS(T, NAME)                                                       \
  template [[host_name("nonzero_chunk_counts_" #NAME)]] [[kernel]]                    \
  decltype(nonzero_chunk_counts<T>) nonzero_chunk_counts<T>;                          \
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
