// Sort and top-k along one dimension (ATen's sort / topk). Every element maps to an unsigned
// key that grows with the preference (NaN the largest value, -0.0 equal to 0.0; inverted for
// descending / largest=false); equal keys keep index order, so the sort is stable.
//
// Sort (and top-k with k > kMaxK), as a merge sort of every line (the elements along the
// sorted dimension):
//   sort_tiles   one threadgroup per (tile, line): sorts up to a tile of consecutive elements
//                of a line (runs in registers, then merge rounds in threadgroup memory over
//                (key, position) pairs) and writes them to the outputs when the tile is the
//                whole line, else to device working buffers as a sorted run.
//   sort_merge   one thread per kMergeRun outputs of a line: finds its start in two sorted
//                runs by a merge-path search and merges; each pass doubles the run length,
//                so a line of n elements needs log2(n / tile) passes; the last one writes the
//                first `count` elements to the outputs.
//
// Top-k with k <= kMaxK by radix selection, reading every line once:
//   topk_chunks  one threadgroup per (chunk, line): the group keeps a chunk of the line in
//                registers (kPerThread consecutive elements a thread), finds the chunk's k-th
//                best key digit by digit (kDigitBits a pass, a threadgroup histogram each) and
//                writes the chunk's k best (key, index) candidates, in index order. Repeated
//                over the candidates while a line has more of them than one chunk holds.
//   topk_final   one threadgroup per line: the same selection over the line's last candidates
//                (or over the line itself when it fits one chunk), then each of the k winners
//                counts the winners that go before it, which is its output position.
#include <metal_stdlib>
using namespace metal;
#include "params/sort.h"
// Order-preserving keys of key_bits(x) significant bits: larger key = larger value.
inline uint key_bits(float) { return 32; }
inline uint key_bits(half) { return 16; }
inline uint key_bits(bfloat) { return 16; }
inline uint key_bits(long) { return 64; }
inline uint key_bits(int) { return 32; }
inline uint key_bits(short) { return 16; }
inline uint key_bits(char) { return 8; }
inline uint key_bits(uchar) { return 8; }
inline uint key_bits(bool) { return 8; }

inline uint float_key(uint bits, uint sign, bool nan, bool zero) {
  if (nan) return sign | (sign - 1);  // all ones: NaN above +inf
  if (zero) return sign;              // -0.0 and 0.0 tie
  return (bits & sign) ? ~bits & (sign | (sign - 1)) : bits | sign;
}
inline uint order_key(float x) { return float_key(as_type<uint>(x), 0x80000000u, isnan(x), x == 0.0f); }
inline uint order_key(half x) {
  return float_key(as_type<ushort>(x), 0x8000u, isnan(float(x)), float(x) == 0.0f);
}
inline uint order_key(bfloat x) {
  return float_key(as_type<ushort>(x), 0x8000u, isnan(float(x)), float(x) == 0.0f);
}
inline ulong order_key(long x) { return ulong(x) ^ (1ul << 63); }
inline uint order_key(int x) { return uint(x) ^ 0x80000000u; }
inline uint order_key(short x) { return uint(ushort(x)) ^ 0x8000u; }
inline uint order_key(char x) { return uint(uchar(x)) ^ 0x80u; }
inline uint order_key(uchar x) { return uint(x); }
inline uint order_key(bool x) { return x ? 1u : 0u; }

// order_key(x), or its reverse order (within key_bits(x)) when `invert`.
template <typename T, typename K>
inline K ranked_key(T x, bool invert) {
  const K key = K(order_key(x));
  if (!invert) return key;
  const uint bits = key_bits(x);
  const K all = bits == sizeof(K) * 8 ? ~K(0) : (K(1) << bits) - 1;
  return key ^ all;
}

// ---------------------------------------------------------------------------- sort

// Must match the constants of native/ops/sort.cpp.
constant constexpr uint kTileRun = 8;    // pairs a sort_tiles thread sorts in registers
constant constexpr uint kMergeRun = 32;  // outputs per sort_merge thread

// (key, position) pairs of a tile: the position breaks ties, so the order is total and stable.
template <typename K>
inline bool pair_before(K a_key, ushort a_order, K b_key, ushort b_order) {
  return a_key < b_key || (a_key == b_key && a_order < b_order);
}

// How many of the first `diagonal` pairs of merging the sorted runs a and b come from a.
template <typename K>
inline uint tile_merge_path(threadgroup const K* keys, threadgroup const ushort* order, uint a, uint a_count,
                            uint b, uint b_count, uint diagonal) {
  uint low = diagonal > b_count ? diagonal - b_count : 0, high = min(diagonal, a_count);
  while (low < high) {
    const uint middle = (low + high) / 2;
    const uint from_b = b + diagonal - 1 - middle;
    if (pair_before(keys[a + middle], order[a + middle], keys[from_b], order[from_b])) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Sorts a tile of up to TILE consecutive elements of a line by key (descending sorts invert
// the keys), ties by position: each thread sorts kTileRun pairs in registers, then merge
// rounds in threadgroup memory double the sorted runs, each thread producing kTileRun
// outputs of a round from where the merge path puts them.
template <typename T, typename K, uint TILE>
kernel void sort_tiles(device const T* input [[buffer(0)]],
                       device T* work_values [[buffer(1)]],
                       device uint* work_indices [[buffer(2)]],
                       device T* values [[buffer(3)]],
                       device long* indices [[buffer(4)]],
                       constant SortParams& p [[buffer(5)]],
                       uint2 group [[threadgroup_position_in_grid]],
                       uint t [[thread_index_in_threadgroup]],
                       uint threads [[threads_per_threadgroup]]) {
  threadgroup K keys[TILE];
  threadgroup ushort order[TILE];  // positions in the tile
  threadgroup T tile[TILE];
  const uint line = group.y, begin = group.x * TILE;
  const uint count = min(TILE, p.layout.length - begin);
  const uint n = threads * kTileRun;  // a power of two, at least count (the host's choice)
  const LineOffsets at = line_offsets(p.layout, line);
  const bool descending = p.descending != 0;
  K run_keys[kTileRun];
  ushort run_order[kTileRun];
  const uint first = t * kTileRun;
  for (uint i = 0; i < kTileRun; ++i) {
    const uint position = first + i;
    if (position < count) {
      const T x = input[at.input + long(begin + position) * p.layout.input_stride];
      tile[position] = x;
      run_keys[i] = ranked_key<T, K>(x, descending);
    } else {
      run_keys[i] = ~K(0);  // padding: after every element (ties go by position)
    }
    run_order[i] = ushort(position);
    // Insertion into the sorted registers before it.
    for (uint j = i; j > 0 && pair_before(run_keys[j], run_order[j], run_keys[j - 1], run_order[j - 1]); --j) {
      const K key = run_keys[j];
      const ushort position_j = run_order[j];
      run_keys[j] = run_keys[j - 1];
      run_order[j] = run_order[j - 1];
      run_keys[j - 1] = key;
      run_order[j - 1] = position_j;
    }
  }
  for (uint width = kTileRun;; width *= 2) {
    for (uint i = 0; i < kTileRun; ++i) {
      keys[first + i] = run_keys[i];
      order[first + i] = run_order[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (width >= n) break;
    const uint a = first / (2 * width) * (2 * width), b = a + width;
    const uint diagonal = first - a;
    uint from_a = a + tile_merge_path(keys, order, a, width, b, width, diagonal);
    uint from_b = b + (diagonal - (from_a - a));
    for (uint i = 0; i < kTileRun; ++i) {
      const bool take_b = from_b < b + width &&
                          (from_a >= b || pair_before(keys[from_b], order[from_b], keys[from_a], order[from_a]));
      const uint from = take_b ? from_b++ : from_a++;
      run_keys[i] = keys[from];
      run_order[i] = order[from];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  const bool whole_line = p.layout.length <= TILE;
  for (uint i = t; i < count; i += threads) {
    const uint from = order[i];
    if (whole_line) {
      if (i >= p.count) break;
      values[at.values + long(i) * p.layout.values_stride] = tile[from];
      indices[at.indices + long(i) * p.layout.indices_stride] = long(from);
    } else {
      const ulong to = ulong(line) * p.layout.length + begin + i;
      work_values[to] = tile[from];
      work_indices[to] = begin + from;
    }
  }
}

// How many of the first `diagonal` outputs of merging runs a and b come from a (a wins ties):
// a binary search along the merge path.
template <typename T, typename K>
inline uint merge_path(device const T* a, uint a_count, device const T* b, uint b_count, uint diagonal,
                       bool descending) {
  uint low = diagonal > b_count ? diagonal - b_count : 0, high = min(diagonal, a_count);
  while (low < high) {
    const uint middle = (low + high) / 2;
    const K b_key = ranked_key<T, K>(b[diagonal - 1 - middle], descending);
    if (!(b_key < ranked_key<T, K>(a[middle], descending))) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// One thread per kMergeRun outputs of a (pair of runs, line): finds where its outputs start
// in both runs, then merges; the right run's element goes first only when its key is smaller
// (ties keep order). Runs between passes carry uint indices; FINAL: the last pass, writing the
// first `count` outputs of each line (values and int64 indices) to the outputs.
template <typename T, typename K, bool FINAL>
kernel void sort_merge(device const T* source_values [[buffer(0)]],
                       device const uint* source_indices [[buffer(1)]],
                       device T* values [[buffer(2)]],
                       device uint* work_indices [[buffer(3)]],
                       constant SortParams& p [[buffer(4)]],
                       device long* indices [[buffer(5)]],
                       uint2 position [[thread_position_in_grid]]) {
  const uint run = position.x, line = position.y;
  const ulong first_out = ulong(run) * kMergeRun;
  if (line >= p.lines || first_out >= p.layout.length) return;
  const uint begin = uint(first_out / (2 * ulong(p.width)) * 2 * p.width);
  const uint middle = uint(min(ulong(begin) + p.width, ulong(p.layout.length)));
  const uint end = uint(min(ulong(begin) + 2 * ulong(p.width), ulong(p.layout.length)));
  const ulong base = ulong(line) * p.layout.length;
  const bool descending = p.descending != 0;
  device const T* left_run = source_values + base + begin;
  device const T* right_run = source_values + base + middle;
  const uint diagonal = uint(first_out) - begin;
  uint left = merge_path<T, K>(left_run, middle - begin, right_run, end - middle, diagonal, descending);
  uint right = diagonal - left;
  left += begin;
  right += middle;
  const uint last = min(uint(first_out) + kMergeRun, end);
  const LineOffsets at = FINAL ? line_offsets(p.layout, line) : LineOffsets{0, 0, 0};
  T left_value = left < middle ? source_values[base + left] : T(0);
  T right_value = right < end ? source_values[base + right] : T(0);
  for (uint out = uint(first_out); out < last; ++out) {
    const bool take_right = right < end && (left >= middle || ranked_key<T, K>(right_value, descending) <
                                                                  ranked_key<T, K>(left_value, descending));
    const T value = take_right ? right_value : left_value;
    const uint index = source_indices[base + (take_right ? right : left)];
    if (take_right) {
      if (++right < end) right_value = source_values[base + right];
    } else {
      if (++left < middle) left_value = source_values[base + left];
    }
    if (FINAL) {
      if (out >= p.count) break;
      values[at.values + long(out) * p.layout.values_stride] = value;
      indices[at.indices + long(out) * p.layout.indices_stride] = long(index);
    } else {
      values[base + out] = value;
      work_indices[base + out] = index;
    }
  }
}

// ---------------------------------------------------------------------------- top-k

// Must match the constants of native/ops/sort.cpp.
constant constexpr uint kPerThread = 8;   // line elements a thread keeps in registers
constant constexpr uint kMaxK = 256;      // largest k of the radix path (threadgroup arrays)
constant constexpr uint kDigitBits = 8;
constant constexpr uint kBins = 1u << kDigitBits;

// Exclusive prefix sum of `value` over the threadgroup's threads (in thread order); `total`
// gets the sum. `simd_totals` holds one uint per SIMD-group.
inline uint group_exclusive_sum(uint value, threadgroup uint* simd_totals, uint threads, uint lane, uint simd,
                                uint simd_width, thread uint& total) {
  const uint before_in_simd = simd_prefix_exclusive_sum(value);
  if (lane == simd_width - 1 || simd * simd_width + lane == threads - 1) {
    simd_totals[simd] = before_in_simd + value;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint before = before_in_simd;
  total = 0;
  const uint simds = (threads + simd_width - 1) / simd_width;
  for (uint s = 0; s < simds; ++s) {
    if (s < simd) before += simd_totals[s];
    total += simd_totals[s];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return before;
}

// The group's `want`-th largest key (1 <= want <= keys held) as `threshold`, and how many keys
// equal to it belong to the `want` largest (`take_equal`): a digit a pass, most significant
// first, counting only the keys that match the digits chosen so far.
template <typename K>
inline void radix_select(thread const K* keys, uint held, uint want, uint bits, threadgroup atomic_uint* histogram,
                         threadgroup uint* choice, uint t, uint threads, uint lane, uint simd,
                         thread K& threshold, thread uint& take_equal) {
  K prefix = 0, mask = 0;
  uint remaining = want;
  for (int shift = int(bits) - int(kDigitBits); shift >= 0; shift -= int(kDigitBits)) {
    for (uint b = t; b < kBins; b += threads) atomic_store_explicit(&histogram[b], 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = 0; i < held; ++i) {
      if ((keys[i] & mask) == prefix) {
        atomic_fetch_add_explicit(&histogram[uint(keys[i] >> shift) & (kBins - 1)], 1u, memory_order_relaxed);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (simd == 0) {
      // Lane l owns kBins / 32 bins, from the top digit down: the lane whose bins reach the
      // remaining count picks the digit.
      constexpr uint kPerLane = kBins / 32;
      uint counts[kPerLane];
      uint block = 0;
      for (uint j = 0; j < kPerLane; ++j) {
        counts[j] = atomic_load_explicit(&histogram[kBins - 1 - lane * kPerLane - j], memory_order_relaxed);
        block += counts[j];
      }
      uint above = simd_prefix_exclusive_sum(block);
      if (above < remaining && above + block >= remaining) {
        for (uint j = 0; j < kPerLane; ++j) {
          if (above + counts[j] >= remaining) {
            choice[0] = kBins - 1 - lane * kPerLane - j;
            choice[1] = remaining - above;
            break;
          }
          above += counts[j];
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    prefix |= K(choice[0]) << shift;
    mask |= K(kBins - 1) << shift;
    remaining = choice[1];
  }
  threshold = prefix;
  take_equal = remaining;
}

// Loads thread t's elements [first, first + kPerThread) of this pass's line (clipped to
// `count`) as keys and indices; returns how many it holds.
template <typename T, typename K>
inline uint load_keys(device const T* input, device const K* source_keys, device const uint* source_indices,
                      constant TopkParams& p, long line_at, uint line, uint first, uint count,
                      thread K* keys, thread uint* indices) {
  const uint held = first >= count ? 0 : min(kPerThread, count - first);
  if (p.from_candidates) {
    const ulong base = ulong(line) * p.source_stride + first;
    for (uint i = 0; i < held; ++i) {
      keys[i] = source_keys[base + i];
      indices[i] = source_indices[base + i];
    }
  } else {
    const bool largest = p.largest != 0;  // keys grow with the preference
    for (uint i = 0; i < held; ++i) {
      keys[i] = ranked_key<T, K>(input[line_at + long(first + i) * p.layout.input_stride], !largest);
      indices[i] = first + i;
    }
  }
  return held;
}

// Marks which of the thread's keys are among the group's `want` best (all keys above the
// threshold, equal ones in position order) and returns how many; the group's threads hold
// consecutive positions in thread order.
template <typename K>
inline uint mark_winners(thread const K* keys, uint held, uint want, uint bits, thread bool* wins,
                         threadgroup atomic_uint* histogram, threadgroup uint* choice, threadgroup uint* scratch,
                         uint t, uint threads, uint lane, uint simd, uint simd_width) {
  K threshold;
  uint take_equal;
  radix_select(keys, held, want, bits, histogram, choice, t, threads, lane, simd, threshold, take_equal);
  uint equal = 0;
  for (uint i = 0; i < held; ++i) equal += keys[i] == threshold ? 1 : 0;
  uint total;
  uint equal_before = group_exclusive_sum(equal, scratch, threads, lane, simd, simd_width, total);
  uint winners = 0;
  for (uint i = 0; i < held; ++i) {
    bool win = keys[i] > threshold;
    if (keys[i] == threshold) win = equal_before++ < take_equal;
    wins[i] = win;
    winners += win ? 1 : 0;
  }
  return winners;
}

template <typename T, typename K>
kernel void topk_chunks(device const T* input [[buffer(0)]],
                        device const K* source_keys [[buffer(1)]],
                        device const uint* source_indices [[buffer(2)]],
                        device K* target_keys [[buffer(3)]],
                        device uint* target_indices [[buffer(4)]],
                        constant TopkParams& p [[buffer(5)]],
                        uint2 group [[threadgroup_position_in_grid]],
                        uint t [[thread_index_in_threadgroup]],
                        uint threads [[threads_per_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint simd [[simdgroup_index_in_threadgroup]],
                        uint simd_width [[threads_per_simdgroup]]) {
  threadgroup atomic_uint histogram[kBins];
  threadgroup uint choice[2];   // radix_select's digit and remaining count
  threadgroup uint scratch[32];  // group_exclusive_sum's SIMD-group totals
  const uint chunk = group.x, line = group.y;
  const uint begin = chunk * p.chunk;
  const uint chunk_count = min(p.chunk, p.count - begin);
  const uint want = min(p.k, chunk_count);
  const long line_at = p.from_candidates ? 0 : line_offsets(p.layout, line).input;
  K keys[kPerThread];
  uint indices[kPerThread];
  const uint held = load_keys<T, K>(input, source_keys, source_indices, p, line_at, line, begin + t * kPerThread,
                                    begin + chunk_count, keys, indices);
  bool wins[kPerThread];
  const uint winners = mark_winners(keys, held, want, key_bits(T(0)), wins, histogram, choice, scratch, t, threads, lane,
                                    simd, simd_width);
  uint total;
  uint slot = group_exclusive_sum(winners, scratch, threads, lane, simd, simd_width, total);
  const ulong out = ulong(line) * p.target_stride + ulong(chunk) * p.k;
  for (uint i = 0; i < held; ++i) {
    if (!wins[i]) continue;
    target_keys[out + slot] = keys[i];
    target_indices[out + slot] = indices[i];
    ++slot;
  }
}

template <typename T, typename K>
kernel void topk_final(device const T* input [[buffer(0)]],
                       device const K* source_keys [[buffer(1)]],
                       device const uint* source_indices [[buffer(2)]],
                       device T* values [[buffer(3)]],
                       device long* indices_out [[buffer(4)]],
                       constant TopkParams& p [[buffer(5)]],
                       uint line [[threadgroup_position_in_grid]],
                       uint t [[thread_index_in_threadgroup]],
                       uint threads [[threads_per_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint simd [[simdgroup_index_in_threadgroup]],
                       uint simd_width [[threads_per_simdgroup]]) {
  threadgroup atomic_uint histogram[kBins];
  threadgroup uint choice[2];   // radix_select's digit and remaining count
  threadgroup uint scratch[32];  // group_exclusive_sum's SIMD-group totals
  threadgroup K winner_keys[kMaxK];
  threadgroup uint winner_indices[kMaxK];
  const LineOffsets at = line_offsets(p.layout, line);
  K keys[kPerThread];
  uint indices[kPerThread];
  const uint held = load_keys<T, K>(input, source_keys, source_indices, p, at.input, line, t * kPerThread, p.count,
                                    keys, indices);
  bool wins[kPerThread];
  const uint winners = mark_winners(keys, held, p.k, key_bits(T(0)), wins, histogram, choice, scratch, t, threads, lane,
                                    simd, simd_width);
  uint total;
  uint slot = group_exclusive_sum(winners, scratch, threads, lane, simd, simd_width, total);
  for (uint i = 0; i < held; ++i) {
    if (!wins[i]) continue;
    winner_keys[slot] = keys[i];
    winner_indices[slot] = indices[i];
    ++slot;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint w = t; w < p.k; w += threads) {
    const K key = winner_keys[w];
    const uint index = winner_indices[w];
    uint rank = 0;
    for (uint j = 0; j < p.k; ++j) {
      const K other = winner_keys[j];
      rank += (other > key || (other == key && winner_indices[j] < index)) ? 1 : 0;
    }
    values[at.values + long(rank) * p.layout.values_stride] = input[at.input + long(index) * p.layout.input_stride];
    indices_out[at.indices + long(rank) * p.layout.indices_stride] = long(index);
  }
}

#define TOPK_KERNELS(T, K, NAME)                                                      \
  template [[host_name("topk_chunks_" #NAME)]] [[kernel]]                              \
  decltype(topk_chunks<T, K>) topk_chunks<T, K>;                                      \
  template [[host_name("topk_final_" #NAME)]] [[kernel]]                               \
  decltype(topk_final<T, K>) topk_final<T, K>;

TOPK_KERNELS(float, uint, float)
TOPK_KERNELS(half, uint, half)
TOPK_KERNELS(bfloat, uint, bfloat)
TOPK_KERNELS(long, ulong, long)
TOPK_KERNELS(int, uint, int)
TOPK_KERNELS(short, uint, short)
TOPK_KERNELS(char, uint, char)
TOPK_KERNELS(uchar, uint, uchar)
TOPK_KERNELS(bool, uint, bool)

// ---------------------------------------------------------------------------- median

// The median of one line sorted ascending (NaN last): the lower median, or the first NaN when
// there is one (torch.median); with ignore_nan the lower median of the numbers, or a NaN when
// there are none (torch.nanmedian). One thread: a binary search for the first NaN.
template <typename T>
kernel void sort_median(device const T* sorted [[buffer(0)]],
                        device T* median [[buffer(1)]],
                        constant uint& length [[buffer(2)]],
                        constant uint& ignore_nan [[buffer(3)]],
                        uint thread_id [[thread_position_in_grid]]) {
  if (thread_id != 0) return;
  uint numbers = 0, end = length;
  while (numbers < end) {
    const uint middle = (numbers + end) / 2;
    const T value = sorted[middle];
    if (value != value) {
      end = middle;
    } else {
      numbers = middle + 1;
    }
  }
  uint at;
  if (ignore_nan) {
    at = numbers > 0 ? (numbers - 1) / 2 : 0;
  } else {
    at = numbers < length ? numbers : (length - 1) / 2;
  }
  median[0] = sorted[at];
}

// Tiles of 2048 elements (1024 for 64-bit keys) keep threadgroup memory under 32 KB.
#define SORT_KERNELS(T, K, TILE, NAME)                                                \
  template [[host_name("sort_tiles_" #NAME)]] [[kernel]]                               \
  decltype(sort_tiles<T, K, TILE>) sort_tiles<T, K, TILE>;                            \
  template [[host_name("sort_merge_" #NAME)]] [[kernel]]                               \
  decltype(sort_merge<T, K, false>) sort_merge<T, K, false>;                          \
  template [[host_name("sort_merge_final_" #NAME)]] [[kernel]]                         \
  decltype(sort_merge<T, K, true>) sort_merge<T, K, true>;                            \
  template [[host_name("sort_median_" #NAME)]] [[kernel]]                              \
  decltype(sort_median<T>) sort_median<T>;

SORT_KERNELS(float, uint, 2048, float)
SORT_KERNELS(half, uint, 2048, half)
SORT_KERNELS(bfloat, uint, 2048, bfloat)
SORT_KERNELS(long, ulong, 1024, long)
SORT_KERNELS(int, uint, 2048, int)
SORT_KERNELS(short, uint, 2048, short)
SORT_KERNELS(char, uint, 2048, char)
SORT_KERNELS(uchar, uint, 2048, uchar)
SORT_KERNELS(bool, uint, 2048, bool)

// ---------------------------------------------------------------------------- bounded keys
// Stable LSD radix sort of lines of int32 keys in [-1, bound) (the sorted forms of index_put
// accumulate and scatter: -1 marks an index out of range and sorts first), with the positions
// the keys had in their line: ceil(bits / 11) passes (bits: those of bound + 1) of a digit of
// RadixSortParams::digit_bits each, instead of a merge sort's log2(n / tile) passes. A pass
// reads each line in blocks of up to kRadixBlock consecutive keys:
//   radix_count    one threadgroup per (block, line): the block's count of each digit;
//   radix_offsets  one threadgroup per line: the exclusive prefix sums of the counts in
//                  (digit, block) order, where the block's first key of each digit goes;
//   radix_scatter  one threadgroup per (block, line): moves every key and its position there,
//                  its rank among the block's equal digits following key order (stable).
// The shape constants (kRadixGroup, kRadixRounds: keys a thread takes, one a round) are in
// params/sort.h, shared with the host.
constant constexpr uint kRadixMaxSimds = kRadixGroup / 32;  // SIMD-groups of 32 lanes or more

inline uint radix_digit(int key, constant RadixSortParams& p) {
  return (uint(key + 1) >> p.shift) & ((1u << p.digit_bits) - 1);
}

// Rounds of the block that hold keys (the same for the whole group).
inline uint radix_rounds(constant RadixSortParams& p, uint block) {
  return min(kRadixRounds, (p.length - block * kRadixBlock + kRadixGroup - 1) / kRadixGroup);
}

kernel void radix_count(device const int* keys [[buffer(0)]], device uint* counts [[buffer(1)]],
                        constant RadixSortParams& p [[buffer(2)]],
                        uint2 group [[threadgroup_position_in_grid]],
                        uint t [[thread_index_in_threadgroup]]) {
  threadgroup atomic_uint histogram[kRadixMaxBins];
  const uint bins = 1u << p.digit_bits;
  for (uint b = t; b < bins; b += kRadixGroup) atomic_store_explicit(&histogram[b], 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const long line_at = long(group.y) * p.length;
  for (uint at = group.x * kRadixBlock + t, end = min(p.length, (group.x + 1) * kRadixBlock); at < end;
       at += kRadixGroup) {
    atomic_fetch_add_explicit(&histogram[radix_digit(keys[line_at + at], p)], 1u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint b = t; b < bins; b += kRadixGroup) {
    counts[(long(group.y) * bins + b) * p.blocks + group.x] = atomic_load_explicit(&histogram[b], memory_order_relaxed);
  }
}

// In place: each thread sums a contiguous share of the line's counts, then rewrites it as
// offsets from its share's start.
kernel void radix_offsets(device uint* counts [[buffer(0)]], constant RadixSortParams& p [[buffer(1)]],
                          uint line [[threadgroup_position_in_grid]],
                          uint t [[thread_index_in_threadgroup]]) {
  threadgroup uint scanned[kRadixGroup];
  const uint entries = (1u << p.digit_bits) * p.blocks;
  const uint share = (entries + kRadixGroup - 1) / kRadixGroup;
  device uint* line_counts = counts + long(line) * entries;
  const uint first = min(t * share, entries), end = min(first + share, entries);
  uint sum = 0;
  for (uint i = first; i < end; ++i) sum += line_counts[i];
  scanned[t] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint stride = 1; stride < kRadixGroup; stride *= 2) {  // inclusive scan of the shares' sums
    const uint before = t >= stride ? scanned[t - stride] : 0;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    scanned[t] += before;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  uint offset = scanned[t] - sum;
  for (uint i = first; i < end; ++i) {
    const uint count = line_counts[i];
    line_counts[i] = offset;
    offset += count;
  }
}

// A round takes the block's next kRadixGroup keys, one a thread. Lanes with equal digits find
// each other by a ballot per digit bit (plus one for lanes without a key); the lowest of them
// records their number for its SIMD-group. Each key goes after the block's earlier keys of its
// digit: those of earlier rounds (`placed`), of earlier SIMD-groups and of lower lanes.
kernel void radix_scatter(device const int* keys [[buffer(0)]], device const int* positions [[buffer(1)]],
                          device int* sorted_keys [[buffer(2)]], device int* sorted_positions [[buffer(3)]],
                          device const uint* offsets [[buffer(4)]], constant RadixSortParams& p [[buffer(5)]],
                          uint2 group [[threadgroup_position_in_grid]],
                          uint t [[thread_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint simd [[simdgroup_index_in_threadgroup]],
                          uint simd_width [[threads_per_simdgroup]]) {
  threadgroup atomic_uint placed[kRadixMaxBins];  // the line's output offset of the digit's next key
  threadgroup uchar simd_counts[kRadixMaxSimds][kRadixMaxBins];  // this round's: at most a SIMD-group
  const uint bins = 1u << p.digit_bits;
  const long line_at = long(group.y) * p.length;
  for (uint b = t; b < bins; b += kRadixGroup) {
    atomic_store_explicit(&placed[b], offsets[(long(group.y) * bins + b) * p.blocks + group.x],
                          memory_order_relaxed);
    for (uint s = 0; s < kRadixMaxSimds; ++s) simd_counts[s][b] = 0;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const ulong lanes = simd_width >= 64 ? ~0ul : (1ul << simd_width) - 1;
  const uint rounds = radix_rounds(p, group.x);
  for (uint r = 0; r < rounds; ++r) {
    const uint at = group.x * kRadixBlock + r * kRadixGroup + t;
    const bool present = at < p.length;
    const int key = present ? keys[line_at + at] : 0;
    const uint digit = present ? radix_digit(key, p) : bins;  // bit digit_bits: no key
    ulong peers = lanes;
    for (uint b = 0; b <= p.digit_bits; ++b) {
      const bool set = (digit >> b) & 1u;
      const ulong voted = ulong(simd_ballot(set));
      peers &= set ? voted : ~voted;
    }
    const bool leader = present && ctz(peers) == lane;
    if (leader) simd_counts[simd][digit] = uchar(popcount(peers));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (present) {
      uint to = atomic_load_explicit(&placed[digit], memory_order_relaxed) + popcount(peers & ((1ul << lane) - 1));
      for (uint s = 0; s < simd; ++s) to += simd_counts[s][digit];
      sorted_keys[line_at + to] = key;
      sorted_positions[line_at + to] = p.first_pass ? int(at) : positions[line_at + at];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (leader) {
      atomic_fetch_add_explicit(&placed[digit], uint(simd_counts[simd][digit]), memory_order_relaxed);
      simd_counts[simd][digit] = 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}
