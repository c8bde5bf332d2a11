// Cumulative sum along one dimension (ATen's cumsum). Long lines (the elements along the
// scanned dimension) take one pass, scan_line: a threadgroup per line, every element read and
// written once. Otherwise three passes over chunks of each line, none of which needs threads
// to cooperate:
//   scan_chunk_totals   one thread per (chunk, line): the sum of its chunk.
//   scan_chunk_offsets  one thread per line: exclusive prefix sum of the chunk totals.
//   scan_apply          one thread per (chunk, line): running sum from the chunk's offset.
// A line that fits in one chunk needs only scan_apply. Every element is first converted to
// the output dtype (torch casts before summing), then accumulated in float32 for floating
// outputs and in 64-bit wrapping integer arithmetic for integer outputs.
#include <metal_stdlib>
using namespace metal;
#include "params/scan.h"

struct LineOffsets {
  long input;
  long output;
};

inline LineOffsets line_offsets(constant ScanParams& p, uint line) {
  LineOffsets at = {0, 0};
  for (int d = int(p.outer_dims) - 1; d >= 0; --d) {
    const uint coordinate = line % p.outer_sizes[d];
    line /= p.outer_sizes[d];
    at.input += long(coordinate) * p.input_outer[d];
    at.output += long(coordinate) * p.output_outer[d];
  }
  return at;
}

// The accumulator of an output dtype: float for floating outputs, ulong (wrapping) otherwise.
template <typename Out> struct ScanAccumulator { typedef ulong type; };
template <> struct ScanAccumulator<float> { typedef float type; };
template <> struct ScanAccumulator<half> { typedef float type; };
template <> struct ScanAccumulator<bfloat> { typedef float type; };

template <typename Acc, typename Out, typename In>
inline Acc scan_term(In value) {
  return Acc(Out(value));
}

template <typename In, typename Out>
kernel void scan_chunk_totals(device const In* input [[buffer(0)]],
                              device typename ScanAccumulator<Out>::type* totals [[buffer(1)]],
                              constant ScanParams& p [[buffer(2)]],
                              uint2 position [[thread_position_in_grid]]) {
  typedef typename ScanAccumulator<Out>::type Acc;
  const uint chunk = position.x, line = position.y;
  if (chunk >= p.chunks || line >= p.lines) return;
  const long at = line_offsets(p, line).input;
  const uint begin = chunk * p.chunk_length;
  const uint end = min(begin + p.chunk_length, p.length);
  Acc sum = Acc(0);
  for (uint i = begin; i < end; ++i) sum += scan_term<Acc, Out>(input[at + long(i) * p.input_stride]);
  totals[ulong(line) * p.chunks + chunk] = sum;
}

template <typename Acc>
kernel void scan_chunk_offsets(device Acc* totals [[buffer(0)]],
                               constant ScanParams& p [[buffer(1)]],
                               uint line [[thread_position_in_grid]]) {
  if (line >= p.lines) return;
  device Acc* line_totals = totals + ulong(line) * p.chunks;
  Acc running = Acc(0);
  for (uint c = 0; c < p.chunks; ++c) {
    const Acc total = line_totals[c];
    line_totals[c] = running;
    running += total;
  }
}

template <typename In, typename Out>
kernel void scan_apply(device const In* input [[buffer(0)]],
                       device const typename ScanAccumulator<Out>::type* offsets [[buffer(1)]],
                       device Out* output [[buffer(2)]],
                       constant ScanParams& p [[buffer(3)]],
                       uint2 position [[thread_position_in_grid]]) {
  typedef typename ScanAccumulator<Out>::type Acc;
  const uint chunk = position.x, line = position.y;
  if (chunk >= p.chunks || line >= p.lines) return;
  const LineOffsets at = line_offsets(p, line);
  const uint begin = chunk * p.chunk_length;
  const uint end = min(begin + p.chunk_length, p.length);
  Acc running = p.chunks > 1 ? offsets[ulong(line) * p.chunks + chunk] : Acc(0);
  for (uint i = begin; i < end; ++i) {
    running += scan_term<Acc, Out>(input[at.input + long(i) * p.input_stride]);
    output[at.output + long(i) * p.output_stride] = Out(running);
  }
}

// One threadgroup per line, in blocks of kLineThreads * kLineValues elements: each thread
// sums its kLineValues consecutive elements in order, the threadgroup adds the threads' totals
// before it (simd_prefix_exclusive_sum, then the totals of the simdgroups before it), and the
// running total of the blocks before carries over.
constant constexpr uint kLineThreads = 256;
constant constexpr uint kLineValues = 16;
constant constexpr uint kLineBlock = kLineThreads * kLineValues;

// The parts a running sum crosses the simdgroup in (one simd_prefix_exclusive_sum of them):
// the float itself, or a wrapping 64-bit sum as three 22-bit limbs in uints, whose sums over
// 32 lanes cannot overflow (Metal has no 64-bit simd collectives on every GPU family).
template <typename Acc> struct SumParts { typedef uint3 type; };
template <> struct SumParts<float> { typedef float type; };

inline float split_sum(float value) { return value; }
inline float join_sum(float parts) { return parts; }
constant constexpr ulong kLimbMask = (1ul << 22) - 1;
inline uint3 split_sum(ulong value) {
  return uint3(uint(value & kLimbMask), uint((value >> 22) & kLimbMask), uint(value >> 44));
}
inline ulong join_sum(uint3 parts) { return ulong(parts.x) + (ulong(parts.y) << 22) + (ulong(parts.z) << 44); }

template <typename In, typename Out>
kernel void scan_line(device const In* input [[buffer(0)]],
                      device Out* output [[buffer(1)]],
                      constant ScanParams& p [[buffer(2)]],
                      uint line [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint simdgroup [[simdgroup_index_in_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]]) {
  typedef typename ScanAccumulator<Out>::type Acc;
  threadgroup Acc simdgroup_totals[kLineThreads / 32];
  const LineOffsets at = line_offsets(p, line);
  Acc carry = Acc(0);
  for (uint block = 0; block < p.length; block += kLineBlock) {
    const uint begin = block + tid * kLineValues;
    Acc prefix[kLineValues];
    Acc running = Acc(0);
    for (uint j = 0; j < kLineValues; ++j) {
      const uint i = begin + j;
      if (i < p.length) running += scan_term<Acc, Out>(input[at.input + long(i) * p.input_stride]);
      prefix[j] = running;
    }
    const typename SumParts<Acc>::type parts_before_lane = simd_prefix_exclusive_sum(split_sum(running));
    const Acc before_lane = join_sum(parts_before_lane);
    if (lane == 31) simdgroup_totals[simdgroup] = before_lane + running;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    Acc before_simdgroup = Acc(0), block_total = Acc(0);
    for (uint s = 0; s < kLineThreads / 32; ++s) {
      const Acc total = simdgroup_totals[s];
      if (s < simdgroup) before_simdgroup += total;
      block_total += total;
    }
    const Acc offset = carry + before_simdgroup + before_lane;
    for (uint j = 0; j < kLineValues; ++j) {
      const uint i = begin + j;
      if (i < p.length) output[at.output + long(i) * p.output_stride] = Out(offset + prefix[j]);
    }
    carry += block_total;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

#define SCAN_LINE_KERNEL(In, IN, Out, OUT)                                            \
  template [[host_name("scan_line_" #IN "_" #OUT)]] [[kernel]]                         \
  decltype(scan_line<In, Out>) scan_line<In, Out>;

#define SCAN_KERNELS(In, IN, Out, OUT)                                                \
  template [[host_name("scan_chunk_totals_" #IN "_" #OUT)]] [[kernel]]                 \
  decltype(scan_chunk_totals<In, Out>) scan_chunk_totals<In, Out>;                    \
  template [[host_name("scan_apply_" #IN "_" #OUT)]] [[kernel]]                        \
  decltype(scan_apply<In, Out>) scan_apply<In, Out>;

// Floating inputs to any floating output; integer and bool inputs to int64 (torch's default),
// int32 or float32.
#define SCAN_FLOAT_INPUT(In, IN)                                                      \
  SCAN_KERNELS(In, IN, float, float)                                                  \
  SCAN_KERNELS(In, IN, half, half)                                                    \
  SCAN_KERNELS(In, IN, bfloat, bfloat)                                                \
  SCAN_LINE_KERNEL(In, IN, float, float)                                              \
  SCAN_LINE_KERNEL(In, IN, half, half)                                                \
  SCAN_LINE_KERNEL(In, IN, bfloat, bfloat)
#define SCAN_INTEGER_INPUT(In, IN)                                                    \
  SCAN_KERNELS(In, IN, long, long)                                                    \
  SCAN_KERNELS(In, IN, int, int)                                                      \
  SCAN_KERNELS(In, IN, float, float)                                                  \
  SCAN_LINE_KERNEL(In, IN, long, long)                                                \
  SCAN_LINE_KERNEL(In, IN, int, int)                                                  \
  SCAN_LINE_KERNEL(In, IN, float, float)

SCAN_FLOAT_INPUT(float, float)
SCAN_FLOAT_INPUT(half, half)
SCAN_FLOAT_INPUT(bfloat, bfloat)
SCAN_INTEGER_INPUT(long, long)
SCAN_INTEGER_INPUT(int, int)
SCAN_INTEGER_INPUT(short, short)
SCAN_INTEGER_INPUT(char, char)
SCAN_INTEGER_INPUT(uchar, uchar)
SCAN_INTEGER_INPUT(bool, bool)

template [[host_name("scan_chunk_offsets_float")]] [[kernel]]
decltype(scan_chunk_offsets<float>) scan_chunk_offsets<float>;
template [[host_name("scan_chunk_offsets_ulong")]] [[kernel]]
decltype(scan_chunk_offsets<ulong>) scan_chunk_offsets<ulong>;
