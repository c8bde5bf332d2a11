// Stable sort and top-k along one dimension (ATen's sort / topk), as a bottom-up merge sort
// of every line (the elements along the sorted dimension) in device working buffers:
//   sort_blocks  one thread per (block, line): copies a block of the input with its indices
//                and insertion-sorts it.
//   sort_merge   one thread per (pair of runs, line): merges two sorted runs; each pass
//                doubles the run length, so a line of n elements needs log2(n / block)
//                passes, and early passes have many threads.
//   sort_store   one thread per (output position, line): writes `count` sorted elements
//                and their int64 indices to the outputs, from the first (sort, top-k), a
//                given position (kthvalue) or the median on.
// Order: ascending or descending, NaN after every number when ascending and before every
// number when descending (torch's order); equal elements keep their input order (stable).
#include <metal_stdlib>
using namespace metal;

constant constexpr uint kMaxDims = 8;

// Must match etm::ops::SortParams (native/ops/sort.cpp). A line is every element along the
// sorted dimension; lines are numbered over the other dimensions (last fastest).
struct SortParams {
  long input_outer[kMaxDims];   // strides of the other dimensions
  long values_outer[kMaxDims];
  long indices_outer[kMaxDims];
  long input_stride;            // along the sorted dimension
  long values_stride;
  long indices_stride;
  uint outer_sizes[kMaxDims];
  uint outer_dims;
  uint length;                  // elements per line
  uint lines;
  uint block;                   // elements per sort_blocks thread
  uint width;                   // run length of a sort_merge pass
  uint count;                   // elements per line that sort_store writes
  uint descending;
  uint select;                  // where sort_store starts: kFromFirst, kFromMedian, kFromNanMedian
  uint first;                   // with kFromFirst: the first sorted position written
};

// kFromMedian: the lower median, or the first NaN when there is one (torch.median);
// kFromNanMedian: the lower median of the numbers, or a NaN when there are none. Both expect an
// ascending sort (NaN last).
constant constexpr uint kFromFirst = 0, kFromMedian = 1, kFromNanMedian = 2;

struct LineOffsets {
  long input;
  long values;
  long indices;
};

inline LineOffsets line_offsets(constant SortParams& p, uint line) {
  LineOffsets at = {0, 0, 0};
  for (int d = int(p.outer_dims) - 1; d >= 0; --d) {
    const uint coordinate = line % p.outer_sizes[d];
    line /= p.outer_sizes[d];
    at.input += long(coordinate) * p.input_outer[d];
    at.values += long(coordinate) * p.values_outer[d];
    at.indices += long(coordinate) * p.indices_outer[d];
  }
  return at;
}

template <typename T>
inline bool is_nan_value(T) { return false; }
inline bool is_nan_value(float x) { return isnan(x); }
inline bool is_nan_value(half x) { return isnan(float(x)); }
inline bool is_nan_value(bfloat x) { return isnan(float(x)); }

// True when `a` must come strictly before `b`.
template <typename T>
inline bool goes_before(T a, T b, bool descending) {
  const bool a_nan = is_nan_value(a), b_nan = is_nan_value(b);
  if (a_nan || b_nan) return descending ? (a_nan && !b_nan) : (b_nan && !a_nan);
  return descending ? (a > b) : (a < b);
}

template <typename T>
kernel void sort_blocks(device const T* input [[buffer(0)]],
                        device T* values [[buffer(1)]],
                        device long* indices [[buffer(2)]],
                        constant SortParams& p [[buffer(3)]],
                        uint2 position [[thread_position_in_grid]]) {
  const uint block = position.x, line = position.y;
  const uint begin = block * p.block;
  if (line >= p.lines || begin >= p.length) return;
  const uint end = min(begin + p.block, p.length);
  const long in_at = line_offsets(p, line).input;
  device T* line_values = values + ulong(line) * p.length;
  device long* line_indices = indices + ulong(line) * p.length;
  const bool descending = p.descending != 0;
  for (uint i = begin; i < end; ++i) {
    const T value = input[in_at + long(i) * p.input_stride];
    uint j = i;
    // Insertion: shift only elements that the new one goes strictly before (stable).
    while (j > begin && goes_before(value, line_values[j - 1], descending)) {
      line_values[j] = line_values[j - 1];
      line_indices[j] = line_indices[j - 1];
      --j;
    }
    line_values[j] = value;
    line_indices[j] = long(i);
  }
}

template <typename T>
kernel void sort_merge(device const T* source_values [[buffer(0)]],
                       device const long* source_indices [[buffer(1)]],
                       device T* values [[buffer(2)]],
                       device long* indices [[buffer(3)]],
                       constant SortParams& p [[buffer(4)]],
                       uint2 position [[thread_position_in_grid]]) {
  const uint pair = position.x, line = position.y;
  const ulong begin = ulong(pair) * 2 * p.width;
  if (line >= p.lines || begin >= p.length) return;
  const uint middle = uint(min(begin + p.width, ulong(p.length)));
  const uint end = uint(min(begin + 2 * ulong(p.width), ulong(p.length)));
  const ulong base = ulong(line) * p.length;
  const bool descending = p.descending != 0;
  uint left = uint(begin), right = middle;
  for (uint out = uint(begin); out < end; ++out) {
    // Take from the right run only when its element goes strictly before: ties keep order.
    const bool take_right =
        right < end && (left >= middle ||
                        goes_before(source_values[base + right], source_values[base + left], descending));
    const uint from = take_right ? right++ : left++;
    values[base + out] = source_values[base + from];
    indices[base + out] = source_indices[base + from];
  }
}

template <typename T>
kernel void sort_store(device const T* sorted_values [[buffer(0)]],
                       device const long* sorted_indices [[buffer(1)]],
                       device T* values [[buffer(2)]],
                       device long* indices [[buffer(3)]],
                       constant SortParams& p [[buffer(4)]],
                       uint2 position [[thread_position_in_grid]]) {
  const uint i = position.x, line = position.y;
  if (i >= p.count || line >= p.lines) return;
  const LineOffsets at = line_offsets(p, line);
  const ulong base = ulong(line) * p.length;
  uint start = p.first;
  if (p.select != kFromFirst) {
    uint numbers = 0, end = p.length;  // NaN sorts last: search for the first one
    while (numbers < end) {
      const uint middle = (numbers + end) / 2;
      if (is_nan_value(sorted_values[base + middle])) {
        end = middle;
      } else {
        numbers = middle + 1;
      }
    }
    if (p.select == kFromMedian) {
      start = numbers < p.length ? numbers : (p.length - 1) / 2;
    } else {
      start = numbers > 0 ? (numbers - 1) / 2 : 0;
    }
  }
  const ulong from = base + start + i;
  values[at.values + long(i) * p.values_stride] = sorted_values[from];
  indices[at.indices + long(i) * p.indices_stride] = sorted_indices[from];
}

#define SORT_KERNELS(T, NAME)                                                         \
  template [[host_name("sort_blocks_" #NAME)]] [[kernel]]                              \
  decltype(sort_blocks<T>) sort_blocks<T>;                                            \
  template [[host_name("sort_merge_" #NAME)]] [[kernel]]                               \
  decltype(sort_merge<T>) sort_merge<T>;                                              \
  template [[host_name("sort_store_" #NAME)]] [[kernel]]                               \
  decltype(sort_store<T>) sort_store<T>;

SORT_KERNELS(float, float)
SORT_KERNELS(half, half)
SORT_KERNELS(bfloat, bfloat)
SORT_KERNELS(long, long)
SORT_KERNELS(int, int)
SORT_KERNELS(short, short)
SORT_KERNELS(char, char)
SORT_KERNELS(uchar, uchar)
SORT_KERNELS(bool, bool)
