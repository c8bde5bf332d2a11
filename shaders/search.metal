// searchsorted / bucketize (ATen semantics): one thread per value, a binary search in the
// value's row of the sorted sequence (the sequence itself when it is 1-D), optionally through a
// sorter permutation. The comparisons are torch's: the search moves right while
// !(element >= value) (left side) or !(element > value) (right side), so a NaN value lands at
// the end of its row.
#include <metal_stdlib>
using namespace metal;
#include "params/search.h"

template <typename T, typename Out>
kernel void search(constant T* values [[buffer(0)]], constant T* sequence [[buffer(1)]],
                   constant long* sorter [[buffer(2)]], device Out* out [[buffer(3)]],
                   device atomic_uint* bad_sorter [[buffer(4)]],
                   constant SearchParams& p [[buffer(5)]], uint i [[thread_position_in_grid]]) {
  long value_at = 0, row_at = 0, sorter_row_at = 0;
  uint index = i;
  for (int d = int(p.dims) - 1; d >= 0; --d) {
    const long c = long(index % p.sizes[d]);
    index /= p.sizes[d];
    value_at += c * p.value_strides[d];
    row_at += c * p.row_strides[d];
    sorter_row_at += c * p.sorter_row_strides[d];
  }
  const T value = values[value_at];
  long start = 0, end = long(p.length);
  while (start < end) {
    const long middle = start + ((end - start) >> 1);
    long position = middle;
    if (p.has_sorter) {
      position = sorter[sorter_row_at + middle * p.sorter_stride];
      if (position < 0 || position >= long(p.length)) {
        atomic_store_explicit(bad_sorter, 1u, memory_order_relaxed);
        position = 0;
      }
    }
    const T element = sequence[row_at + position * p.sequence_stride];
    const bool go_right = p.right ? !(element > value) : !(element >= value);
    if (go_right) {
      start = middle + 1;
    } else {
      end = middle;
    }
  }
  out[i] = Out(start);
}

#define SEARCH_KERNELS(T, NAME)                                                        \
  template [[host_name("search_" #NAME "_int64")]] [[kernel]]                         \
  decltype(search<T, long>) search<T, long>;                                          \
  template [[host_name("search_" #NAME "_int32")]] [[kernel]]                         \
  decltype(search<T, int>) search<T, int>;

SEARCH_KERNELS(float, float)
SEARCH_KERNELS(half, half)
SEARCH_KERNELS(bfloat, bfloat)
SEARCH_KERNELS(long, long)
SEARCH_KERNELS(int, int)
SEARCH_KERNELS(short, short)
SEARCH_KERNELS(char, char)
SEARCH_KERNELS(uchar, uchar)
