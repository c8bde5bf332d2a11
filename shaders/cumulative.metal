// cumprod, cummax / cummin and logcumsumexp along one dimension (ATen semantics): one thread
// per line (the elements along the dimension), which runs through its line in order; with the
// GPU launch shape, long lines take one threadgroup per line (the *_line kernels).
//   cumprod       elements converted to the output dtype first (torch casts before it
//                 multiplies); in order along the line, as torch multiplies: float16 and
//                 bfloat16 outputs in float32, float32 outputs in a double-like product
//                 (WideProduct), integer outputs in 64-bit wrapping products. The line
//                 kernels scan in parallel and redo in order a line whose running product
//                 comes near the accumulator's range (see cumprod_line_float), keeping
//                 torch's results where an intermediate product overflows or underflows.
//   cummax/min    running extreme and the index where it was last reached (ties move the
//                 index forward); once a NaN appears it is the extreme from then on.
//   logcumsumexp  running log(sum(exp)), accumulated in float32 as max + log1p(exp(min - max)).
#include <metal_stdlib>
using namespace metal;
#include "params/cumulative.h"
template <typename Out> struct ProductAccumulator { typedef long type; };
template <> struct ProductAccumulator<float> { typedef float type; };
template <> struct ProductAccumulator<half> { typedef float type; };
template <> struct ProductAccumulator<bfloat> { typedef float type; };

template <typename In, typename Out>
kernel void cumprod(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                    constant CumulativeParams& p [[buffer(2)]], uint line [[thread_position_in_grid]]) {
  typedef typename ProductAccumulator<Out>::type Acc;
  const LineOffsets at = line_offsets(p.layout, line);
  Acc product = Acc(1);
  for (uint i = 0; i < p.layout.length; ++i) {
    // Integer products wrap as torch's (two's complement) do: multiply as unsigned.
    const Acc term = Acc(Out(input[at.input + long(i) * p.layout.input_stride]));
    product = Acc(as_type<ulong>(long(product)) * as_type<ulong>(long(term)));
    output[at.values + long(i) * p.layout.values_stride] = Out(product);
  }
}

// torch's CPU kernel multiplies float32 elements in double and casts each running product to
// float. Metal has no double: the product is kept as (high + low) * 2^exponent, a float-float
// mantissa (about 48 bits, |high| in [0.5, 1)) and an integer exponent bounded as double's, so
// each output is the double product rounded to float but for rare last-bit ties. A product that
// is zero, infinite or NaN (in double's range) continues as a plain float, whose IEEE rules
// are double's.
struct WideProduct {
  float high;
  float low;
  int exponent;
  bool finite_nonzero;
  float special;  // the product while it is not finite_nonzero
};

inline WideProduct wide_one() { return WideProduct{0.5f, 0.0f, 1, true, 0.0f}; }

inline void multiply(thread WideProduct& w, float term) {
  if (!w.finite_nonzero) {
    w.special *= term;
    return;
  }
  if (term == 0.0f || !isfinite(term)) {
    w.finite_nonzero = false;
    w.special = copysign(1.0f, w.high) * term;
    return;
  }
  int term_exponent;
  const float mantissa = frexp(term, term_exponent);
  const float product = w.high * mantissa;
  const float low = fma(w.low, mantissa, fma(w.high, mantissa, -product));
  const float sum = product + low;
  int shift;
  w.high = frexp(sum, shift);
  w.low = ldexp(low - (sum - product), -shift);
  w.exponent += term_exponent + shift;
  if (w.exponent > 1024 || w.exponent < -1074) {  // past double's largest or smallest magnitude
    w.finite_nonzero = false;
    w.special = copysign(w.exponent > 0 ? INFINITY : 0.0f, w.high);
  }
}

inline float wide_value(WideProduct w) {
  return w.finite_nonzero ? ldexp(w.high + w.low, w.exponent) : w.special;
}

// The in-order products of one line: float16 / bfloat16 outputs in float32, float32 outputs in
// a WideProduct.
template <typename In, typename Out>
inline void cumprod_line_in_float(device const In* input, device Out* output, constant CumulativeParams& p,
                                  LineOffsets at) {
  float product = 1.0f;
  for (uint i = 0; i < p.layout.length; ++i) {
    product *= float(Out(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = Out(product);
  }
}

template <typename In>
inline void cumprod_line_wide(device const In* input, device float* output, constant CumulativeParams& p,
                              LineOffsets at) {
  WideProduct product = wide_one();
  for (uint i = 0; i < p.layout.length; ++i) {
    multiply(product, float(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = wide_value(product);
  }
}

template <typename In, typename Out>
kernel void cumprod_float(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                          constant CumulativeParams& p [[buffer(2)]],
                          uint line [[thread_position_in_grid]]) {
  cumprod_line_in_float(input, output, p, line_offsets(p.layout, line));
}

template <typename In>
kernel void cumprod_wide(device const In* input [[buffer(0)]], device float* output [[buffer(1)]],
                         constant CumulativeParams& p [[buffer(2)]],
                         uint line [[thread_position_in_grid]]) {
  cumprod_line_wide(input, output, p, line_offsets(p.layout, line));
}

template <typename T> inline bool is_nan_value(T v) { return false; }
template <> inline bool is_nan_value(float v) { return isnan(v); }
template <> inline bool is_nan_value(half v) { return isnan(float(v)); }
template <> inline bool is_nan_value(bfloat v) { return isnan(float(v)); }

template <typename T, bool Max>
kernel void cumulative_extreme(device const T* input [[buffer(0)]], device T* values [[buffer(1)]],
                               device long* indices [[buffer(2)]],
                               constant CumulativeParams& p [[buffer(3)]],
                               uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  T best = T(0);  // the first element replaces it: each element is read once
  long best_index = 0;
  for (uint i = 0; i < p.layout.length; ++i) {
    const T v = input[at.input + long(i) * p.layout.input_stride];
    const bool better = Max ? v >= best : v <= best;
    if (i == 0 || is_nan_value(v) || (!is_nan_value(best) && better)) {
      best = v;
      best_index = long(i);
    }
    values[at.values + long(i) * p.layout.values_stride] = best;
    indices[at.indices + long(i) * p.layout.indices_stride] = best_index;
  }
}

// log(1 + x) for x in [0, 1] (MSL has no log1p): Kahan's correction of log(1 + x).
inline float log_one_plus(float x) {
  const float u = 1.0f + x;
  return u == 1.0f ? x : log(u) * (x / (u - 1.0f));
}

// NaN in either operand propagates (MSL's min/max would drop it).
inline float log_add_exp(float x, float y) {
  if (isnan(x) || isnan(y)) return NAN;
  const float low = min(x, y);
  const float high = max(x, y);
  if (low != high || isfinite(low)) return high + log_one_plus(exp(low - high));
  return x;  // both infinite with one sign: x == y
}

template <typename T>
kernel void logcumsumexp(device const T* input [[buffer(0)]], device T* output [[buffer(1)]],
                         constant CumulativeParams& p [[buffer(2)]],
                         uint line [[thread_position_in_grid]]) {
  const LineOffsets at = line_offsets(p.layout, line);
  float running = -INFINITY;
  for (uint i = 0; i < p.layout.length; ++i) {
    running = log_add_exp(running, float(input[at.input + long(i) * p.layout.input_stride]));
    output[at.values + long(i) * p.layout.values_stride] = T(running);
  }
}

// One threadgroup per line, in blocks of kLineThreads * kLineValues elements. Each thread scans
// its kLineValues consecutive elements in order; the scan of the threads' totals (each thread
// combines the totals of the lanes before it in its simdgroup, then the totals of the
// simdgroups before it) and the carry of the blocks before give each thread what precedes its
// elements. The combining step is associative (Op::combine(before, after)), so the results are
// the in-order ones: exactly for cummax / cummin, up to float rounding for logcumsumexp.
// The barriers stay in the kernels' bodies (the CPU device runs such kernels without fibers).
constant constexpr uint kLineThreads = kCumulativeLineThreads;
constant constexpr uint kLineValues = 16;
constant constexpr uint kLineBlock = kLineThreads * kLineValues;
constant constexpr uint kSimdWidth = 32;

// Where a thread's elements of a block start, and how many it has.
struct BlockShare {
  uint begin;
  uint count;   // 0 past the line's end
  uint active;  // threads with elements: a prefix of the group
};

inline BlockShare block_share(uint block, uint length, uint tid) {
  const uint begin = block + tid * kLineValues;
  return BlockShare{begin, begin < length ? min(kLineValues, length - begin) : 0u,
                    min(kLineThreads, (length - block + kLineValues - 1) / kLineValues)};
}

// Between the block's two barriers, after every thread stored its total in thread_totals:
// the combined totals of the lanes before this one in its simdgroup (`none` for lane 0 and
// past the line).
template <typename Op>
inline typename Op::State scan_lanes(threadgroup const typename Op::State* thread_totals, BlockShare share,
                                     typename Op::State none, uint tid, uint lane) {
  typedef typename Op::State State;
  if (share.count == 0 || lane == 0) return none;
  State lanes_before = thread_totals[tid - lane];
  for (uint t = tid - lane + 1; t < tid; ++t) lanes_before = Op::combine(lanes_before, thread_totals[t]);
  return lanes_before;
}

// Whether this thread is its simdgroup's last with elements (it stores the simdgroup's total).
inline bool last_active_lane(BlockShare share, uint tid, uint lane) {
  return share.count > 0 && tid + 1 == min(tid - lane + kSimdWidth, share.active);
}

// After the second barrier: puts what precedes the thread's elements (the carry, the earlier
// simdgroups' totals, lanes_before) in front of local[0, count), and moves the carry past the
// block. carry means nothing while first_block.
template <typename Op>
inline void finish_block(thread typename Op::State* local, BlockShare share, typename Op::State lanes_before,
                         thread typename Op::State& carry, bool first_block,
                         threadgroup const typename Op::State* simdgroup_totals, uint simdgroup, uint lane) {
  typedef typename Op::State State;
  if (share.count > 0) {
    State before = carry;
    bool has_before = !first_block;
    for (uint s = 0; s < simdgroup; ++s) {
      before = has_before ? Op::combine(before, simdgroup_totals[s]) : simdgroup_totals[s];
      has_before = true;
    }
    if (lane > 0) {
      before = has_before ? Op::combine(before, lanes_before) : lanes_before;
      has_before = true;
    }
    if (has_before)
      for (uint j = 0; j < kLineValues; ++j)
        if (j < share.count) local[j] = Op::combine(before, local[j]);
  }
  const uint simdgroups = (share.active + kSimdWidth - 1) / kSimdWidth;
  for (uint s = 0; s < simdgroups; ++s)
    carry = first_block && s == 0 ? simdgroup_totals[0] : Op::combine(carry, simdgroup_totals[s]);
}

// The extreme so far (widened exactly: float, int or long) and the index of the element
// holding it, in a struct without padding bytes (it is copied whole through threadgroup
// memory): a later NaN wins, then a later element at least as large (Max) or as small, as
// cumulative_extreme's in-order step.
template <typename T> struct Widened { typedef int type; typedef uint index; };
template <> struct Widened<float> { typedef float type; typedef uint index; };
template <> struct Widened<half> { typedef float type; typedef uint index; };
template <> struct Widened<bfloat> { typedef float type; typedef uint index; };
template <> struct Widened<long> { typedef long type; typedef long index; };

template <typename T> struct Extreme {
  typename Widened<T>::type value;
  typename Widened<T>::index index;
};

template <typename T, bool Max> struct ExtremeScan {
  typedef Extreme<T> State;
  static State combine(State before, State after) {
    if (is_nan_value(after.value)) return after;
    if (is_nan_value(before.value)) return before;
    return (Max ? after.value >= before.value : after.value <= before.value) ? after : before;
  }
};

template <typename T, bool Max>
kernel void cumulative_extreme_line(device const T* input [[buffer(0)]], device T* values [[buffer(1)]],
                                    device long* indices [[buffer(2)]],
                                    constant CumulativeParams& p [[buffer(3)]],
                                    uint line [[threadgroup_position_in_grid]],
                                    uint tid [[thread_index_in_threadgroup]],
                                    uint simdgroup [[simdgroup_index_in_threadgroup]],
                                    uint lane [[thread_index_in_simdgroup]]) {
  typedef ExtremeScan<T, Max> Op;
  typedef Extreme<T> State;
  threadgroup State thread_totals[kLineThreads];
  threadgroup State simdgroup_totals[kLineThreads / kSimdWidth];
  const LineOffsets at = line_offsets(p.layout, line);
  State carry = {0, 0};
  for (uint block = 0; block < p.layout.length; block += kLineBlock) {
    const BlockShare share = block_share(block, p.layout.length, tid);
    State local[kLineValues];
    for (uint j = 0; j < kLineValues; ++j) {
      if (j < share.count) {
        const uint i = share.begin + j;
        const State element = {typename Widened<T>::type(input[at.input + long(i) * p.layout.input_stride]),
                               typename Widened<T>::index(i)};
        local[j] = j == 0 ? element : Op::combine(local[j - 1], element);
      }
    }
    if (share.count > 0) thread_totals[tid] = local[share.count - 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const State lanes_before = scan_lanes<Op>(thread_totals, share, carry, tid, lane);
    if (last_active_lane(share, tid, lane)) {
      const State own = local[share.count - 1];
      simdgroup_totals[simdgroup] = lane > 0 ? Op::combine(lanes_before, own) : own;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    finish_block<Op>(local, share, lanes_before, carry, block == 0, simdgroup_totals, simdgroup, lane);
    for (uint j = 0; j < share.count; ++j) {
      const uint i = share.begin + j;
      values[at.values + long(i) * p.layout.values_stride] = T(local[j].value);
      indices[at.indices + long(i) * p.layout.indices_stride] = long(local[j].index);
    }
  }
}

struct LogAddExpScan {
  typedef float State;
  static float combine(float before, float after) { return log_add_exp(before, after); }
};

template <typename T>
kernel void logcumsumexp_line(device const T* input [[buffer(0)]], device T* output [[buffer(1)]],
                              constant CumulativeParams& p [[buffer(2)]],
                              uint line [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float thread_totals[kLineThreads];
  threadgroup float simdgroup_totals[kLineThreads / kSimdWidth];
  const LineOffsets at = line_offsets(p.layout, line);
  float carry = -INFINITY;
  for (uint block = 0; block < p.layout.length; block += kLineBlock) {
    const BlockShare share = block_share(block, p.layout.length, tid);
    float local[kLineValues];
    for (uint j = 0; j < kLineValues; ++j) {
      if (j < share.count) {
        const float element = float(input[at.input + long(share.begin + j) * p.layout.input_stride]);
        local[j] = j == 0 ? element : log_add_exp(local[j - 1], element);
      }
    }
    if (share.count > 0) thread_totals[tid] = local[share.count - 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float lanes_before = scan_lanes<LogAddExpScan>(thread_totals, share, carry, tid, lane);
    if (last_active_lane(share, tid, lane)) {
      const float own = local[share.count - 1];
      simdgroup_totals[simdgroup] = lane > 0 ? log_add_exp(lanes_before, own) : own;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    finish_block<LogAddExpScan>(local, share, lanes_before, carry, block == 0, simdgroup_totals, simdgroup, lane);
    for (uint j = 0; j < share.count; ++j)
      output[at.values + long(share.begin + j) * p.layout.values_stride] = T(local[j]);
  }
}

// cumprod's line kernels. Integer outputs: 64-bit wrapping products, which are associative, so
// the block scan gives the in-order results exactly.
struct WrappingProduct {
  typedef ulong State;
  static ulong combine(ulong before, ulong after) { return before * after; }
};

template <typename In, typename Out>
kernel void cumprod_line_integer(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                                 constant CumulativeParams& p [[buffer(2)]],
                                 uint line [[threadgroup_position_in_grid]],
                                 uint tid [[thread_index_in_threadgroup]],
                                 uint simdgroup [[simdgroup_index_in_threadgroup]],
                                 uint lane [[thread_index_in_simdgroup]]) {
  threadgroup ulong thread_totals[kLineThreads];
  threadgroup ulong simdgroup_totals[kLineThreads / kSimdWidth];
  const LineOffsets at = line_offsets(p.layout, line);
  ulong carry = 1;
  for (uint block = 0; block < p.layout.length; block += kLineBlock) {
    const BlockShare share = block_share(block, p.layout.length, tid);
    ulong local[kLineValues];
    for (uint j = 0; j < kLineValues; ++j) {
      if (j < share.count) {
        const ulong element = as_type<ulong>(long(Out(input[at.input + long(share.begin + j) * p.layout.input_stride])));
        local[j] = j == 0 ? element : local[j - 1] * element;
      }
    }
    if (share.count > 0) thread_totals[tid] = local[share.count - 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const ulong lanes_before = scan_lanes<WrappingProduct>(thread_totals, share, carry, tid, lane);
    if (last_active_lane(share, tid, lane)) {
      const ulong own = local[share.count - 1];
      simdgroup_totals[simdgroup] = lane > 0 ? lanes_before * own : own;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    finish_block<WrappingProduct>(local, share, lanes_before, carry, block == 0, simdgroup_totals, simdgroup, lane);
    for (uint j = 0; j < share.count; ++j)
      output[at.values + long(share.begin + j) * p.layout.values_stride] = Out(as_type<long>(local[j]));
  }
}

// Floating outputs: a product of elements as a sign, the kinds of special elements met (zero,
// infinite, NaN) and the product of the finite nonzero ones' magnitudes, (high + low) *
// 2^exponent (a float-float mantissa, high in [0.5, 1), and an unbounded exponent). Combining two
// is associative up to the mantissa's rounding (about 2^-46), and what the special elements
// make of a product does not depend on their order (any NaN, or a zero and an infinity: NaN;
// else a zero: zero; else an infinity: infinity), so the block scan gives the in-order products
// as long as no running product leaves the accumulator's range before a special element: in
// order it would then stick at infinity or zero. A line where some prefix comes within one
// binade of that range (float32's for float16 / bfloat16 outputs, where float32 also loses
// precision to denormals; double's for float32 outputs, as WideProduct) is redone in order by
// one thread after the scan, so its results are the thread-per-line kernels' exactly.
constant constexpr uint kProductZero = 1;
constant constexpr uint kProductInfinite = 2;
constant constexpr uint kProductNan = 4;
constant constexpr uint kProductNegative = 8;
constant constexpr int kProductExponentLimit = 1 << 28;

struct SplitProduct {
  float high;
  float low;
  int exponent;
  uint flags;  // kProduct*: the special elements met and the sign
};

inline SplitProduct split_product(float x) {
  const uint sign = signbit(x) ? kProductNegative : 0u;
  if (isnan(x)) return SplitProduct{0.5f, 0.0f, 1, kProductNan | sign};
  if (x == 0.0f) return SplitProduct{0.5f, 0.0f, 1, kProductZero | sign};
  if (isinf(x)) return SplitProduct{0.5f, 0.0f, 1, kProductInfinite | sign};
  int exponent;
  const float mantissa = frexp(fabs(x), exponent);
  return SplitProduct{mantissa, 0.0f, exponent, sign};
}

struct SplitProductScan {
  typedef SplitProduct State;
  static SplitProduct combine(SplitProduct before, SplitProduct after) {
    const float product = before.high * after.high;
    const float low = fma(before.high, after.high, -product) + fma(before.high, after.low, before.low * after.high);
    const float sum = product + low;
    int shift;
    const float high = frexp(sum, shift);
    // Saturated far past both ranges (a line is redone in order long before), so it cannot wrap.
    const int exponent = clamp(before.exponent + after.exponent + shift, -kProductExponentLimit, kProductExponentLimit);
    return SplitProduct{high, ldexp(low - (sum - product), -shift), exponent,
                        ((before.flags | after.flags) & ~kProductNegative) |
                            ((before.flags ^ after.flags) & kProductNegative)};
  }
};

inline float product_value(SplitProduct w) {
  const float sign = (w.flags & kProductNegative) ? -1.0f : 1.0f;
  if ((w.flags & kProductNan) || ((w.flags & kProductZero) && (w.flags & kProductInfinite))) return NAN;
  if (w.flags & kProductZero) return sign * 0.0f;
  if (w.flags & kProductInfinite) return sign * INFINITY;
  return sign * ldexp(w.high + w.low, w.exponent);
}

// Whether the in-order product could have left the accumulator's range at this prefix (frexp
// exponents: float32 normal in [-125, 128], double finite down to its denormals in [-1073, 1024]).
template <typename Out> struct ProductRange {
  static int low() { return -124; }
  static int high() { return 127; }
};
template <> struct ProductRange<float> {
  static int low() { return -1072; }
  static int high() { return 1023; }
};

template <typename Out>
inline bool near_range_edge(SplitProduct w) {
  return (w.flags & (kProductZero | kProductInfinite | kProductNan)) == 0 &&
         (w.exponent < ProductRange<Out>::low() || w.exponent > ProductRange<Out>::high());
}

template <typename In, typename Out>
inline void cumprod_line_in_order(device const In* input, device Out* output, constant CumulativeParams& p,
                                  LineOffsets at) {
  cumprod_line_in_float(input, output, p, at);
}

template <typename In>
inline void cumprod_line_in_order(device const In* input, device float* output, constant CumulativeParams& p,
                                  LineOffsets at) {
  cumprod_line_wide(input, output, p, at);
}

// The element as the in-order kernels take it: converted to a float16 / bfloat16 output's dtype
// first, taken as float for a float32 output.
template <typename Out, typename In> inline float product_term(In x) { return float(Out(x)); }

template <typename In, typename Out>
kernel void cumprod_line_float(device const In* input [[buffer(0)]], device Out* output [[buffer(1)]],
                               constant CumulativeParams& p [[buffer(2)]],
                               uint line [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]],
                               uint simdgroup [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]]) {
  typedef SplitProductScan Op;
  threadgroup SplitProduct thread_totals[kLineThreads];
  threadgroup SplitProduct simdgroup_totals[kLineThreads / kSimdWidth];
  threadgroup atomic_uint in_order;
  const LineOffsets at = line_offsets(p.layout, line);
  if (tid == 0) atomic_store_explicit(&in_order, 0u, memory_order_relaxed);
  SplitProduct carry = split_product(1.0f);
  bool near_edge = false;
  for (uint block = 0; block < p.layout.length; block += kLineBlock) {
    const BlockShare share = block_share(block, p.layout.length, tid);
    SplitProduct local[kLineValues];
    for (uint j = 0; j < kLineValues; ++j) {
      if (j < share.count) {
        const SplitProduct element =
            split_product(product_term<Out>(input[at.input + long(share.begin + j) * p.layout.input_stride]));
        local[j] = j == 0 ? element : Op::combine(local[j - 1], element);
      }
    }
    if (share.count > 0) thread_totals[tid] = local[share.count - 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const SplitProduct lanes_before = scan_lanes<Op>(thread_totals, share, carry, tid, lane);
    if (last_active_lane(share, tid, lane)) {
      const SplitProduct own = local[share.count - 1];
      simdgroup_totals[simdgroup] = lane > 0 ? Op::combine(lanes_before, own) : own;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    finish_block<Op>(local, share, lanes_before, carry, block == 0, simdgroup_totals, simdgroup, lane);
    for (uint j = 0; j < share.count; ++j) {
      near_edge = near_edge || near_range_edge<Out>(local[j]);
      output[at.values + long(share.begin + j) * p.layout.values_stride] = Out(product_value(local[j]));
    }
  }
  if (near_edge) atomic_fetch_or_explicit(&in_order, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0 && atomic_load_explicit(&in_order, memory_order_relaxed) != 0)
    cumprod_line_in_order(input, output, p, at);
}

#define CUMPROD_LINE_FLOAT(In, IN, Out, OUT)                                             \
  template [[host_name("cumprod_line_" #IN "_" #OUT)]] [[kernel]]                       \
  decltype(cumprod_line_float<In, Out>) cumprod_line_float<In, Out>;
#define CUMPROD_FLOAT(In, IN, Out, OUT)                                                  \
  template [[host_name("cumprod_" #IN "_" #OUT)]] [[kernel]]                            \
  decltype(cumprod_float<In, Out>) cumprod_float<In, Out>;                              \
  CUMPROD_LINE_FLOAT(In, IN, Out, OUT)
#define CUMPROD_INTEGER(In, IN, Out, OUT)                                                \
  template [[host_name("cumprod_" #IN "_" #OUT)]] [[kernel]]                            \
  decltype(cumprod<In, Out>) cumprod<In, Out>;                                          \
  template [[host_name("cumprod_line_" #IN "_" #OUT)]] [[kernel]]                       \
  decltype(cumprod_line_integer<In, Out>) cumprod_line_integer<In, Out>;
#define CUMPROD_WIDE(In, IN)                                                             \
  template [[host_name("cumprod_" #IN "_float")]] [[kernel]]                             \
  decltype(cumprod_wide<In>) cumprod_wide<In>;                                           \
  CUMPROD_LINE_FLOAT(In, IN, float, float)
#define CUMPROD_FLOAT_INPUT(In, IN)                                                      \
  CUMPROD_WIDE(In, IN)                                                                   \
  CUMPROD_FLOAT(In, IN, half, half)                                                      \
  CUMPROD_FLOAT(In, IN, bfloat, bfloat)
#define CUMPROD_INTEGER_INPUT(In, IN)                                                    \
  CUMPROD_INTEGER(In, IN, long, long)                                                    \
  CUMPROD_INTEGER(In, IN, int, int)                                                      \
  CUMPROD_WIDE(In, IN)

CUMPROD_FLOAT_INPUT(float, float)
CUMPROD_FLOAT_INPUT(half, half)
CUMPROD_FLOAT_INPUT(bfloat, bfloat)
CUMPROD_INTEGER_INPUT(long, long)
CUMPROD_INTEGER_INPUT(int, int)
CUMPROD_INTEGER_INPUT(short, short)
CUMPROD_INTEGER_INPUT(char, char)
CUMPROD_INTEGER_INPUT(uchar, uchar)
CUMPROD_INTEGER_INPUT(bool, bool)

#define EXTREME_KERNELS(T, NAME)                                                         \
  template [[host_name("cummax_" #NAME)]] [[kernel]]                                    \
  decltype(cumulative_extreme<T, true>) cumulative_extreme<T, true>;                    \
  template [[host_name("cummin_" #NAME)]] [[kernel]]                                    \
  decltype(cumulative_extreme<T, false>) cumulative_extreme<T, false>;                  \
  template [[host_name("cummax_line_" #NAME)]] [[kernel]]                               \
  decltype(cumulative_extreme_line<T, true>) cumulative_extreme_line<T, true>;          \
  template [[host_name("cummin_line_" #NAME)]] [[kernel]]                               \
  decltype(cumulative_extreme_line<T, false>) cumulative_extreme_line<T, false>;

EXTREME_KERNELS(float, float)
EXTREME_KERNELS(half, half)
EXTREME_KERNELS(bfloat, bfloat)
EXTREME_KERNELS(long, long)
EXTREME_KERNELS(int, int)
EXTREME_KERNELS(short, short)
EXTREME_KERNELS(char, char)
EXTREME_KERNELS(uchar, uchar)
EXTREME_KERNELS(bool, bool)

template [[host_name("logcumsumexp_float")]] [[kernel]] decltype(logcumsumexp<float>) logcumsumexp<float>;
template [[host_name("logcumsumexp_half")]] [[kernel]] decltype(logcumsumexp<half>) logcumsumexp<half>;
template [[host_name("logcumsumexp_bfloat")]] [[kernel]] decltype(logcumsumexp<bfloat>) logcumsumexp<bfloat>;
template [[host_name("logcumsumexp_line_float")]] [[kernel]]
decltype(logcumsumexp_line<float>) logcumsumexp_line<float>;
template [[host_name("logcumsumexp_line_half")]] [[kernel]]
decltype(logcumsumexp_line<half>) logcumsumexp_line<half>;
template [[host_name("logcumsumexp_line_bfloat")]] [[kernel]]
decltype(logcumsumexp_line<bfloat>) logcumsumexp_line<bfloat>;
