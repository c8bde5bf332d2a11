// Support for kernels the translator turned into barrier regions (msl_barrier_regions.cpp):
// one call runs a whole threadgroup, the code between barriers as loops over its threads,
// with every thread's values that live across a barrier in a frame of its own (simdgroup
// matrices in their simdgroup's storage, one 8x8 block per matrix). A SIMD-group matrix
// operation runs once per simdgroup between two regions, on whole rows of those blocks, and
// multiplies as plain 8x8 matrices. A simd_* / quad_*
// collective becomes two regions: every thread that reaches it publishes its operand into the
// call site's lane array, then every such thread computes its result from the array
// (reductions once per simdgroup); shuffle_and_fill publishes its data and filling value.
#pragma once

#include <new>

#include "etm_bfloat.h"
#include "etm_simd.h"
#include "etm_simdgroup_matrix.h"

// The region function's loops over a group's threads vectorise when g++ may take the test for
// 2- and 3-dimensional groups out of a loop, split a loop at a bound on the thread index
// (`if (lid < stride)`) and version it for aliasing; -O2 does none of these. Only these
// functions get the options (they cost compile time). Floating-point sums are never
// reassociated, so results stay bit-identical.
#if defined(__clang__)
#define ETM_REGION_FUNCTION
#else
#define ETM_REGION_FUNCTION \
  __attribute__((optimize("-funswitch-loops", "-fsplit-loops", "-fvect-cost-model=cheap")))
#endif

// Helpers of the barrier-region form that touch only the region function's own storage (lane
// arrays, flags, frames on its stack) and read no argument by reference. In checked kernels
// they stay out of line and unchecked (a call costs less than the access checks, and none of
// it is the kernel's memory); otherwise they keep `otherwise` (inlining attributes).
#if defined(ETM_CPU_VALIDATE) && ETM_CPU_VALIDATE
#define ETM_REGION_UNCHECKED_ELSE(otherwise) __attribute__((ETM_CPU_NOT_INSTRUMENTED, noinline))
#else
#define ETM_REGION_UNCHECKED_ELSE(otherwise) otherwise
#endif
#define ETM_REGION_UNCHECKED ETM_REGION_UNCHECKED_ELSE()

// The largest group the executor runs (cpu_executor.h's kMaxThreadsPerThreadgroup), and the
// last origin of a group whose thread positions cannot pass UINT32_MAX.
namespace etm_regions {
inline constexpr uint32_t kMaxGroupThreads = 1024;
inline constexpr uint32_t kLastSafeOrigin = UINT32_MAX - kMaxGroupThreads;
}  // namespace etm_regions

// The region function reads the group's values from a copy of its own, which no store in the
// kernel can change (they stay in registers), and declines (to fibers) a group in the last
// kMaxGroupThreads positions of a grid dimension, which no real grid reaches. Past those tests
// the compiler knows that `origin + thread` does not wrap, so `in[gid]` with a 32-bit gid in a
// loop over the threads reads consecutive elements: the loop vectorises instead of gathering
// element by element. One test per value: g++ combines `a > c || b > c` into one test from
// which it no longer knows either bound.
#define ETM_REGION_LOCAL_GROUP(group)                                                \
  const etm_cpu_group group##_copy = *(group);                                       \
  group = &group##_copy;                                                             \
  if (group##_copy.origin[0] > etm_regions::kLastSafeOrigin) return 1;               \
  if (group##_copy.origin[1] > etm_regions::kLastSafeOrigin) return 1;               \
  if (group##_copy.origin[2] > etm_regions::kLastSafeOrigin) return 1;               \
  if (group##_copy.thread_count > etm_regions::kMaxGroupThreads) return 1;

namespace etm_regions {
using metal::ulong2;

// Per-thread simdgroup matrices live with their simdgroup, not in the threads' frames: each
// matrix variable (each element of an array of them) is one 32-lane block in which lane l's
// two elements sit at row-major position (row, column) of its fragment, so the block is the
// 8x8 matrix itself, row by row. Matrix operations read and write whole rows; a thread's code
// sees its own two elements through lane_at.
constexpr uint32_t matrix_slot(uint32_t lane) {
  const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
  return (at.row * 8 + at.column) / 2;
}
struct matrix_slot_table {
  uint8_t slot[32];
};
constexpr matrix_slot_table make_matrix_slots() {
  matrix_slot_table table{};
  for (uint32_t lane = 0; lane < 32; ++lane) table.slot[lane] = uint8_t(matrix_slot(lane));
  return table;
}
inline constexpr matrix_slot_table kMatrixSlots = make_matrix_slots();

template <class T> struct is_matrix_storage : std::false_type {};
template <class T> struct is_matrix_storage<metal::simdgroup_matrix<T, 8, 8>> : std::true_type {};
template <class T, size_t N> struct is_matrix_storage<T[N]> : is_matrix_storage<T> {};

// The simdgroup's blocks of a per-thread variable of type T (a matrix or an array of them).
template <class T> struct lane_matrices {
  static_assert(is_matrix_storage<T>::value, "only simdgroup matrices and arrays of them are stored by simdgroup");
  alignas(16) unsigned char bytes[32 * sizeof(T)];
};

template <class T> struct lane_array;

// Lane `lane`'s copy of a variable of type T whose blocks start at `block`: a matrix
// reference, or for an array a view indexing into its elements' blocks.
template <class T> inline decltype(auto) lane_at(unsigned char* block, uint32_t lane) {
  if constexpr (std::is_array_v<T>) {
    return lane_array<T>{block, lane};
  } else {
    return *reinterpret_cast<T*>(block + kMatrixSlots.slot[lane] * sizeof(T));
  }
}
template <class T> struct lane_array {
  using element = std::remove_extent_t<T>;
  unsigned char* block;
  uint32_t lane;
  template <class I> decltype(auto) operator[](I index) const {
    return lane_at<element>(block + size_t(index) * 32 * sizeof(element), lane);
  }
};
template <class T> inline decltype(auto) lane_at(lane_matrices<T>& storage, uint32_t lane) {
  return lane_at<T>(storage.bytes, lane);
}

// A thread's copy of an array of matrices set from a value of the array's type (an initialiser).
template <class View, class T> inline void assign_lane(View&& view, const T& value) {
  if constexpr (std::is_array_v<T>) {
    for (size_t i = 0; i < std::extent_v<T>; ++i) assign_lane(view[i], value[i]);
  } else {
    view = value;
  }
}

// The simdgroup a matrix operation runs for: its active lanes (not returned, inside the
// group) and the lane whose view the call's arguments were evaluated in.
struct simdgroup {
  uint64_t active;
  uint32_t leader_lane;

  bool full() const { return active == 0xffffffffu; }
  bool has(uint32_t lane) const { return ((active >> lane) & 1u) != 0; }
  // The matrix's block (its elements row by row) from the leader's copy.
  template <class T> T* block(T& leader_copy) const { return &leader_copy - kMatrixSlots.slot[leader_lane]; }
};

// Bit i of the result: flags[base + i] is set, for the 32 flags from base (bool bytes 0 or 1).
ETM_REGION_UNCHECKED_ELSE(inline) uint64_t lane_flags(const bool* flags, uint32_t base) {
#if defined(__SSE2__)
  // Negated, a true byte is 0xff: the byte mask instruction gathers the sign bits.
  typedef char bytes16 __attribute__((vector_size(16)));
  bytes16 low, high;
  __builtin_memcpy(&low, flags + base, sizeof low);
  __builtin_memcpy(&high, flags + base + 16, sizeof high);
  const uint32_t low_bits = uint32_t(__builtin_ia32_pmovmskb128(-low));
  const uint32_t high_bits = uint32_t(__builtin_ia32_pmovmskb128(-high));
  return uint64_t(low_bits | high_bits << 16);
#else
  uint64_t lanes = 0;
  for (uint32_t word = 0; word < 4; ++word) {
    uint64_t bytes;
    __builtin_memcpy(&bytes, flags + base + 8 * word, sizeof bytes);
    // The multiplication moves the low bit of byte i to bit 56 + i (no partial products overlap).
    lanes |= (((bytes & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56) << (8 * word);
  }
  return lanes;
#endif
}

// Lanes [base, base + 32) of the group that are inside it.
inline uint64_t group_lanes(uint32_t base, uint32_t count) {
  return count - base >= 32u ? 0xffffffffull : (uint64_t(1) << (count - base)) - 1u;
}

// Lanes [base, base + 32) of the group whose flag is set (a predicate mask's threads).
inline uint64_t flagged_lanes(const bool* flags, uint32_t base, uint32_t count) {
  if (count - base >= 32u) return lane_flags(flags, base);
  uint64_t lanes = 0;
  for (uint32_t lane = 0; lane < count - base; ++lane)
    if (flags[base + lane]) lanes |= uint64_t(1) << lane;
  return lanes;
}

// Lanes [base, base + 32) of the group that are inside it and have not returned.
inline uint64_t active_lanes(const bool* done, uint32_t base, uint32_t count) {
  if (count - base >= 32u) return ~lane_flags(done, base) & 0xffffffffu;
  uint64_t active = 0;
  for (uint32_t lane = 0; lane < count - base; ++lane)
    if (!done[base + lane]) active |= uint64_t(1) << lane;
  return active;
}

// An 8x8 float matrix as eight row vectors (AVX registers where the ISA has them).
typedef float row_vector __attribute__((vector_size(32)));

// All 64 elements of a matrix; inactive lanes read as zero, as on the fiber path.
template <class T>
inline void gather(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& m, row_vector out[8]) {
  const T* elements = reinterpret_cast<const T*>(g.block(m));
  if (g.full()) {
    for (int row = 0; row < 8; ++row) {
      if constexpr (std::is_same_v<T, float>) {
        __builtin_memcpy(&out[row], elements + 8 * row, sizeof(row_vector));
      } else {
        for (int column = 0; column < 8; ++column) out[row][column] = float(elements[8 * row + column]);
      }
    }
    return;
  }
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    const bool in = g.has(lane);
    out[at.row][at.column] = in ? float(elements[8 * at.row + at.column]) : 0.0f;
    out[at.row][at.column + 1] = in ? float(elements[8 * at.row + at.column + 1]) : 0.0f;
  }
}

template <class T>
inline void scatter(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& m, const row_vector in[8]) {
  T* elements = reinterpret_cast<T*>(g.block(m));
  if (g.full()) {
    for (int row = 0; row < 8; ++row) {
      if constexpr (std::is_same_v<T, float>) {
        __builtin_memcpy(elements + 8 * row, &in[row], sizeof(row_vector));
      } else {
        for (int column = 0; column < 8; ++column) elements[8 * row + column] = T(in[row][column]);
      }
    }
    return;
  }
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    elements[8 * at.row + at.column] = T(in[at.row][at.column]);
    elements[8 * at.row + at.column + 1] = T(in[at.row][at.column + 1]);
  }
}

// c += a * b. Every element sums in the order of the fiber path (c, then k = 0..7); k runs
// outside the rows so the eight row sums are independent chains held in registers.
inline void multiply_rows(const row_vector a[8], const row_vector b[8], row_vector c[8]) {
  row_vector sums[8];
  for (int row = 0; row < 8; ++row) sums[row] = c[row];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const row_vector b_row = b[k];
#pragma GCC unroll 8
    for (int row = 0; row < 8; ++row) sums[row] += a[row][k] * b_row;
  }
  for (int row = 0; row < 8; ++row) c[row] = sums[row];
}

// A row of a float block in memory (blocks are only 4-byte aligned in general). Rows are read
// and written through it in place: a function returning one would change the ABI without AVX.
typedef float unaligned_row __attribute__((vector_size(32), aligned(4), may_alias));

// d = a * b + c (c null: zero) on float blocks of a full simdgroup, in the same order as
// multiply_rows. b's rows are read into registers first; then row by row, c's row and a's
// elements (broadcast from the block) are read before d's row is written, so d may be a, b or
// c. One row vector at a time: copying the blocks through arrays made g++ move them as one
// 256-byte memcpy of 16-byte pieces, which the 32-byte row loads then waited on.
inline void multiply_blocks(const float* a, const float* b, const float* c, float* d) {
  row_vector b_rows[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) b_rows[k] = *reinterpret_cast<const unaligned_row*>(b + 8 * k);
#pragma GCC unroll 8
  for (int row = 0; row < 8; ++row) {
    row_vector sum = c ? *reinterpret_cast<const unaligned_row*>(c + 8 * row) : row_vector{};
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) sum += a[8 * row + k] * b_rows[k];
    *reinterpret_cast<unaligned_row*>(d + 8 * row) = sum;
  }
}
template <class TD, class TA, class TB, class TC>
inline constexpr bool all_float = std::is_same_v<TD, float> && std::is_same_v<TA, float> &&
                                  std::is_same_v<TB, float> && std::is_same_v<TC, float>;

// d = a * b + c (c null: zero) in float through row vectors, for any element types and lanes.
// Out of line: only the float blocks of full simdgroups are worth their inlined code.
template <class TD, class TA, class TB, class TC>
__attribute__((noinline)) void multiply_gathered(const simdgroup& g, metal::simdgroup_matrix<TD, 8, 8>& d,
                                                 metal::simdgroup_matrix<TA, 8, 8>& a,
                                                 metal::simdgroup_matrix<TB, 8, 8>& b,
                                                 metal::simdgroup_matrix<TC, 8, 8>* c) {
  row_vector ma[8], mb[8], mc[8] = {};
  gather(g, a, ma);
  gather(g, b, mb);
  if (c) gather(g, *c, mc);
  multiply_rows(ma, mb, mc);
  scatter(g, d, mc);
}

// d = a * b + c in float, summed in the same order as the fiber path (c, then k = 0..7).
template <class TD, class TA, class TB, class TC>
__attribute__((always_inline)) inline void simdgroup_multiply_accumulate(const simdgroup& g,
                                                                         metal::simdgroup_matrix<TD, 8, 8>& d,
                                                                         metal::simdgroup_matrix<TA, 8, 8>& a,
                                                                         metal::simdgroup_matrix<TB, 8, 8>& b,
                                                                         metal::simdgroup_matrix<TC, 8, 8>& c) {
  if constexpr (all_float<TD, TA, TB, TC>) {
    if (g.full()) {
      multiply_blocks(reinterpret_cast<float*>(g.block(a)), reinterpret_cast<float*>(g.block(b)),
                      reinterpret_cast<float*>(g.block(c)), reinterpret_cast<float*>(g.block(d)));
      return;
    }
  }
  multiply_gathered(g, d, a, b, &c);
}

template <class TD, class TA, class TB>
__attribute__((always_inline)) inline void simdgroup_multiply(const simdgroup& g, metal::simdgroup_matrix<TD, 8, 8>& d,
                                                              metal::simdgroup_matrix<TA, 8, 8>& a,
                                                              metal::simdgroup_matrix<TB, 8, 8>& b) {
  if constexpr (all_float<TD, TA, TB, float>) {
    if (g.full()) {
      multiply_blocks(reinterpret_cast<float*>(g.block(a)), reinterpret_cast<float*>(g.block(b)), nullptr,
                      reinterpret_cast<float*>(g.block(d)));
      return;
    }
  }
  multiply_gathered(g, d, a, b, static_cast<metal::simdgroup_matrix<float, 8, 8>*>(nullptr));
}

// Whole rows move with __builtin_memcpy, which the access instrumentation does not see (a call
// to plain memcpy): kernels built with counters or access checks copy element by element.
#if ETM_CPU_INSTRUMENTED
inline constexpr bool kCopyWholeRows = false;
#else
inline constexpr bool kCopyWholeRows = true;
#endif

// Element (r, c) of the matrix from source[(origin.y + r) * elements_per_row + origin.x + c],
// or with transpose from the source's (c, r); lanes that are not active keep theirs.
template <class T, class S>
inline void simdgroup_load(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& destination, const S* source,
                           ulong elements_per_row = 8, ulong2 matrix_origin = ulong2(0ul, 0ul),
                           bool transpose_matrix = false) {
  T* elements = reinterpret_cast<T*>(g.block(destination));
  const S* origin = source + matrix_origin.y * elements_per_row + matrix_origin.x;
  if (g.full()) {
    if constexpr (kCopyWholeRows && std::is_same_v<T, float> && std::is_same_v<S, float>) {
      if (!transpose_matrix) {
#pragma GCC unroll 8
        for (ulong row = 0; row < 8; ++row)
          *reinterpret_cast<unaligned_row*>(elements + 8 * row) =
              *reinterpret_cast<const unaligned_row*>(origin + row * elements_per_row);
        return;
      }
    }
    for (ulong row = 0; row < 8; ++row) {
      if (kCopyWholeRows && !transpose_matrix && std::is_same_v<T, S>) {
        __builtin_memcpy(elements + 8 * row, origin + row * elements_per_row, 8 * sizeof(T));
        continue;
      }
      for (ulong column = 0; column < 8; ++column) {
        const S* from =
            transpose_matrix ? origin + column * elements_per_row + row : origin + row * elements_per_row + column;
        elements[8 * row + column] = T(*from);
      }
    }
    return;
  }
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    for (ulong column = at.column; column < at.column + 2; ++column) {
      const S* from = transpose_matrix ? origin + column * elements_per_row + at.row
                                       : origin + at.row * elements_per_row + column;
      elements[8 * at.row + column] = T(*from);
    }
  }
}

template <class T, class D>
inline void simdgroup_store(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& matrix, D* destination,
                            ulong elements_per_row = 8, ulong2 matrix_origin = ulong2(0ul, 0ul),
                            bool transpose_matrix = false) {
  const T* elements = reinterpret_cast<const T*>(g.block(matrix));
  D* origin = destination + matrix_origin.y * elements_per_row + matrix_origin.x;
  if (g.full()) {
    for (ulong row = 0; row < 8; ++row) {
      if (kCopyWholeRows && !transpose_matrix && std::is_same_v<T, D>) {
        __builtin_memcpy(origin + row * elements_per_row, elements + 8 * row, 8 * sizeof(T));
        continue;
      }
      for (ulong column = 0; column < 8; ++column) {
        D* to = transpose_matrix ? origin + column * elements_per_row + row : origin + row * elements_per_row + column;
        *to = D(elements[8 * row + column]);
      }
    }
    return;
  }
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    for (ulong column = at.column; column < at.column + 2; ++column) {
      D* to =
          transpose_matrix ? origin + column * elements_per_row + at.row : origin + at.row * elements_per_row + column;
      *to = D(elements[8 * at.row + column]);
    }
  }
}

inline constexpr size_t kCollectiveSlotBytes = 64;

// One collective call site: each thread's published operand (the operand type's size apart),
// whether it took part (one flag per thread, padded to whole simdgroups, so publishing writes
// no word other threads write too), and each simdgroup's reduction once computed. Before the
// region that publishes, the group resets the site; that region publishes for each thread
// that takes part; the region after reads it.
struct collective {
  unsigned char* slots;
  bool* joined;
  unsigned char* reductions;  // kCollectiveSlotBytes per simdgroup, after the flags
  uint32_t count;
  size_t stride = kCollectiveSlotBytes;  // the size of the operand type the site publishes
  uint32_t joined_base = UINT32_MAX;  // the simdgroup whose lanes `joined_lanes` holds
  uint64_t joined_lanes = 0;

  // Storage for `count` operands of up to kCollectiveSlotBytes, and flags_bytes(count).
  collective(void* slot_storage, void* flag_storage, uint32_t count)
      : slots(static_cast<unsigned char*>(slot_storage)),
        joined(static_cast<bool*>(flag_storage)),
        reductions(static_cast<unsigned char*>(flag_storage) + joined_bytes(count)),
        count(count) {
    for (uint32_t i = count; i < joined_bytes(count); ++i) joined[i] = false;
  }
  static constexpr size_t joined_bytes(uint32_t count) { return size_t((count + 31u) / 32u) * 32u; }
  // The flags, then a reduction per simdgroup (joined_bytes is a multiple of 32: aligned).
  static constexpr size_t flags_bytes(uint32_t count) {
    return joined_bytes(count) + size_t((count + 31u) / 32u) * kCollectiveSlotBytes;
  }

  ETM_REGION_UNCHECKED void reset() {
    for (uint32_t i = 0; i < count; ++i) joined[i] = false;
    joined_base = UINT32_MAX;
  }
  // The operand by value: the kernel's read of it is the caller's.
  template <class T> ETM_REGION_UNCHECKED void publish(uint32_t index, T value) {
    static_assert(sizeof(T) <= kCollectiveSlotBytes, "a SIMD-group collective exchanges at most 64 bytes per lane");
    stride = sizeof(T);
    __builtin_memcpy(slots + size_t(index) * sizeof(T), static_cast<const void*>(&value), sizeof(T));
    joined[index] = true;
  }
  ETM_REGION_UNCHECKED uint64_t lanes_joined(uint32_t base) {
    if (joined_base != base) {
      joined_lanes = lane_flags(joined, base);
      joined_base = base;
    }
    return joined_lanes;
  }
  ETM_REGION_UNCHECKED etm_msl::lane_values lanes(uint32_t index) {
    const uint32_t base = index & ~31u;
    return {slots + size_t(base) * stride, stride, lanes_joined(base), index & 31u, 32u};
  }
};

// The columns of the 8x8 float matrix whose rows are rows[0..7], in place: 24 shuffles.
inline void transpose_rows(row_vector rows[8]) {
  typedef int selector __attribute__((vector_size(32)));
  row_vector pairs[8], quads[8];
  // pairs[2i] = a0 b0 a1 b1 | a4 b4 a5 b5, pairs[2i + 1] = a2 b2 a3 b3 | a6 b6 a7 b7 (a, b rows 2i, 2i + 1)
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = __builtin_shuffle(rows[2 * i], rows[2 * i + 1], selector{0, 8, 1, 9, 4, 12, 5, 13});
    pairs[2 * i + 1] = __builtin_shuffle(rows[2 * i], rows[2 * i + 1], selector{2, 10, 3, 11, 6, 14, 7, 15});
  }
  // quads[4h + k] = column k of rows 4h..4h+3 | column k + 4 of them (k < 4)
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j) {
      const row_vector low = pairs[4 * h + j], high = pairs[4 * h + 2 + j];
      quads[4 * h + 2 * j] = __builtin_shuffle(low, high, selector{0, 1, 8, 9, 4, 5, 12, 13});
      quads[4 * h + 2 * j + 1] = __builtin_shuffle(low, high, selector{2, 3, 10, 11, 6, 7, 14, 15});
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    rows[k] = __builtin_shuffle(quads[k], quads[4 + k], selector{0, 1, 2, 3, 8, 9, 10, 11});
    rows[k + 4] = __builtin_shuffle(quads[k], quads[4 + k], selector{4, 5, 6, 7, 12, 13, 14, 15});
  }
}

// simd_sum / simd_product of 8 full float simdgroups side by side in one row vector (element b
// simdgroup groups[b]'s): lanes combined in order, 8 at a time read as rows and transposed
// into columns, which IEEE vector arithmetic combines exactly as the scalar chains would.
template <class Combine> inline constexpr bool kVectorFloatCombine =
    std::is_same_v<Combine, etm_msl::plus<float>> || std::is_same_v<Combine, etm_msl::times<float>>;

template <class Combine>
ETM_REGION_UNCHECKED_ELSE(inline) void reduce_eight_float_simdgroups(collective& c, const uint32_t* groups) {
  row_vector results;
#pragma GCC unroll 4
  for (uint32_t first = 0; first < 32; first += 8) {
    row_vector columns[8];
#pragma GCC unroll 8
    for (uint32_t b = 0; b < 8; ++b)
      __builtin_memcpy(&columns[b], c.slots + (size_t(groups[b]) * 32u + first) * sizeof(float), sizeof(row_vector));
    transpose_rows(columns);
#pragma GCC unroll 8
    for (uint32_t lane = 0; lane < 8; ++lane) {
      if (first + lane == 0) {
        results = columns[0];
      } else if constexpr (std::is_same_v<Combine, etm_msl::plus<float>>) {
        results = results + columns[lane];
      } else {
        results = results * columns[lane];
      }
    }
  }
#pragma GCC unroll 8
  for (uint32_t b = 0; b < 8; ++b)
    __builtin_memcpy(c.reductions + size_t(groups[b]) * kCollectiveSlotBytes, &results[b], sizeof(float));
}

// The reductions of Width full simdgroups (repeats allowed), each combining lanes 0..31 in
// order, as reduce_lanes does. The Width chains of dependent operations run side by side in
// registers instead of one after another (float sums and products of eight as row vectors).
template <class T, uint32_t Width, class Combine>
ETM_REGION_UNCHECKED_ELSE(inline) void reduce_full_simdgroups(collective& c, const uint32_t* groups, Combine combine) {
  if constexpr (Width == 8 && std::is_same_v<T, float> && kVectorFloatCombine<Combine>) {
    reduce_eight_float_simdgroups<Combine>(c, groups);
    return;
  }
  // Inlined: an unchecked function's calls to a checked one stay calls, and checked.
  auto operand = [&](uint32_t b, uint32_t lane) __attribute__((always_inline)) {
    T value;
    __builtin_memcpy(static_cast<void*>(&value), c.slots + (size_t(groups[b]) * 32u + lane) * sizeof(T), sizeof(T));
    return value;
  };
  T results[Width];
#pragma GCC unroll 8
  for (uint32_t b = 0; b < Width; ++b) results[b] = operand(b, 0);
#pragma GCC unroll 4
  for (uint32_t lane = 1; lane < 32; ++lane) {
#pragma GCC unroll 8
    for (uint32_t b = 0; b < Width; ++b) results[b] = T(combine(results[b], operand(b, lane)));
  }
#pragma GCC unroll 8
  for (uint32_t b = 0; b < Width; ++b)
    __builtin_memcpy(c.reductions + size_t(groups[b]) * kCollectiveSlotBytes, static_cast<const void*>(&results[b]),
                     sizeof(T));
}

// Every simdgroup's reduction of the site (those where some lane joined), once every thread
// has published: full simdgroups eight at a time, the rest of them together in a batch of
// 1, 2, 4 or 8 (small groups and predicated collectives often have one or two), the others
// combining their joined lanes as reduce_lanes does.
template <class T, class Combine> ETM_REGION_UNCHECKED void reduce_simdgroups(collective& c, Combine combine) {
  const uint32_t simdgroups = (c.count + 31u) / 32u;
  uint32_t full[8];
  uint32_t batched = 0;
  for (uint32_t g = 0; g < simdgroups; ++g) {
    const uint64_t joined = lane_flags(c.joined, g * 32u);
    if (joined == 0xffffffffu) {
      full[batched++] = g;
      if (batched == 8) {
        reduce_full_simdgroups<T, 8>(c, full, combine);
        batched = 0;
      }
    } else if (joined != 0) {
      const T result =
          etm_msl::reduce_lanes<T>({c.slots + size_t(g) * 32u * sizeof(T), sizeof(T), joined, 0u, 32u}, false, combine);
      __builtin_memcpy(c.reductions + size_t(g) * kCollectiveSlotBytes, static_cast<const void*>(&result), sizeof(T));
    }
  }
  if (batched == 0) return;
  for (uint32_t b = batched; b < 8; ++b) full[b] = full[0];  // computed again, stored again: the same value
  if (batched == 1) {
    reduce_full_simdgroups<T, 1>(c, full, combine);
  } else if (batched == 2) {
    reduce_full_simdgroups<T, 2>(c, full, combine);
  } else if (batched <= 4) {
    reduce_full_simdgroups<T, 4>(c, full, combine);
  } else {
    reduce_full_simdgroups<T, 8>(c, full, combine);
  }
}

// The reductions: simd_ ones computed for the whole group between the region that publishes
// and the one that answers (simd_reduce_<name>, then simd_reduction in each thread), quad_
// ones by each thread from its quad's lanes.
template <class T> ETM_REGION_UNCHECKED_ELSE(inline) T simd_reduction(const collective& c, uint32_t index) {
  T result;
  __builtin_memcpy(static_cast<void*>(&result), c.reductions + size_t(index >> 5) * kCollectiveSlotBytes, sizeof(T));
  return result;
}
template <class T> struct minimum {
  T operator()(const T& a, const T& b) const { return T(::metal::min(a, b)); }
};
template <class T> struct maximum {
  T operator()(const T& a, const T& b) const { return T(::metal::max(a, b)); }
};
template <class T> using bitwise_and = etm_msl::bitwise<T, etm_msl::bit_and>;
template <class T> using bitwise_or = etm_msl::bitwise<T, etm_msl::bit_or>;
template <class T> using bitwise_xor = etm_msl::bitwise<T, etm_msl::bit_xor>;
#define ETM_REGION_REDUCTION(name, Combine)                                \
  template <class T> inline void simd_reduce_##name(collective& c) {       \
    reduce_simdgroups<T>(c, Combine{});                                    \
  }                                                                        \
  template <class T> ETM_REGION_UNCHECKED_ELSE(inline) T quad_##name(collective& c, uint32_t i) {\
    return etm_msl::reduce_lanes<T>(c.lanes(i), true, Combine{});          \
  }
ETM_REGION_REDUCTION(sum, etm_msl::plus<T>)
ETM_REGION_REDUCTION(product, etm_msl::times<T>)
ETM_REGION_REDUCTION(min, minimum<T>)
ETM_REGION_REDUCTION(max, maximum<T>)
ETM_REGION_REDUCTION(and, bitwise_and<T>)
ETM_REGION_REDUCTION(or, bitwise_or<T>)
ETM_REGION_REDUCTION(xor, bitwise_xor<T>)
#undef ETM_REGION_REDUCTION

// The region form of the other simd_ / quad_ collectives: the operand comes from the lane
// array, the other arguments as in Metal.
#define ETM_REGION_COLLECTIVES(prefix, quad, vote_type)                                               \
  template <class T> inline T prefix##prefix_inclusive_sum(collective& c, uint32_t i) {               \
    return etm_msl::scan_lanes<T>(c.lanes(i), quad, true, T(0), etm_msl::plus<T>{});                 \
  }                                                                                                   \
  template <class T> inline T prefix##prefix_exclusive_sum(collective& c, uint32_t i) {               \
    return etm_msl::scan_lanes<T>(c.lanes(i), quad, false, T(0), etm_msl::plus<T>{});                \
  }                                                                                                   \
  template <class T> inline T prefix##prefix_inclusive_product(collective& c, uint32_t i) {           \
    return etm_msl::scan_lanes<T>(c.lanes(i), quad, true, T(1), etm_msl::times<T>{});                \
  }                                                                                                   \
  template <class T> inline T prefix##prefix_exclusive_product(collective& c, uint32_t i) {           \
    return etm_msl::scan_lanes<T>(c.lanes(i), quad, false, T(1), etm_msl::times<T>{});               \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle(collective& c, uint32_t i, ushort lane) {               \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::index, lane);          \
  }                                                                                                   \
  template <class T> inline T prefix##broadcast(collective& c, uint32_t i, ushort lane) {             \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::index, lane);          \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle_up(collective& c, uint32_t i, ushort delta) {           \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::up, delta);            \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle_down(collective& c, uint32_t i, ushort delta) {         \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::down, delta);          \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle_xor(collective& c, uint32_t i, ushort mask) {           \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::exclusive_or, mask);   \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle_rotate_up(collective& c, uint32_t i, ushort delta) {    \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::rotate_up, delta);     \
  }                                                                                                   \
  template <class T> inline T prefix##shuffle_rotate_down(collective& c, uint32_t i, ushort delta) {  \
    return etm_msl::shuffle_lanes<T>(c.lanes(i), quad, etm_msl::shuffle_kind::rotate_down, delta);   \
  }                                                                                                   \
  template <class T>                                                                                \
  inline T prefix##shuffle_and_fill_up(collective& c, uint32_t i, ushort delta, ushort modulo = 0) {  \
    return etm_msl::shuffle_and_fill_lanes<T>(c.lanes(i), quad, false, delta, modulo);               \
  }                                                                                                 \
  template <class T>                                                                                \
  inline T prefix##shuffle_and_fill_down(collective& c, uint32_t i, ushort delta, ushort modulo = 0) { \
    return etm_msl::shuffle_and_fill_lanes<T>(c.lanes(i), quad, true, delta, modulo);                \
  }                                                                                                 \
  template <class T> inline T prefix##broadcast_first(collective& c, uint32_t i) {                    \
    return etm_msl::broadcast_first_lanes<T>(c.lanes(i), quad);                                      \
  }                                                                                                   \
  inline metal::vote_type prefix##ballot(collective& c, uint32_t i) {                                 \
    uint64_t active = 0;                                                                              \
    const uint64_t bits = etm_msl::ballot_lanes(c.lanes(i), quad, &active);                           \
    return etm_msl::vote_access::make<metal::vote_type>(bits, active);                                \
  }                                                                                                   \
  inline metal::vote_type prefix##active_threads_mask(collective& c, uint32_t i) {                    \
    uint64_t active = 0;                                                                              \
    etm_msl::ballot_lanes(c.lanes(i), quad, &active);                                                 \
    return etm_msl::vote_access::make<metal::vote_type>(active, active);                              \
  }                                                                                                   \
  inline bool prefix##all(collective& c, uint32_t i) {                                                \
    uint64_t active = 0;                                                                              \
    return etm_msl::ballot_lanes(c.lanes(i), quad, &active) == active;                                \
  }                                                                                                   \
  inline bool prefix##any(collective& c, uint32_t i) {                                                \
    return etm_msl::ballot_lanes(c.lanes(i), quad, nullptr) != 0;                                     \
  }                                                                                                   \
  inline bool prefix##is_first(collective& c, uint32_t i) {                                           \
    return etm_msl::is_first_active_lanes(c.lanes(i), quad);                                          \
  }

ETM_REGION_COLLECTIVES(simd_, false, simd_vote)
ETM_REGION_COLLECTIVES(quad_, true, quad_vote)
#undef ETM_REGION_COLLECTIVES

// ---- c10::metal's threadgroup reductions for a whole group
//
// Inductor's reduction kernels call c10::metal::threadgroup_sum / _prod / _max / _min /
// _argmax / _argmin / _welford_reduce / _welford_combine, ATen's group norm threadgroup_sum2
// (c10/metal/reduction_utils.h, inlined into their source), which synchronise inside. The
// region form turns such a call into three steps: every thread that reaches it publishes its
// arguments (a region), the whole group's results are computed here once, following c10's
// algorithm stage by stage over the simdgroups (the same lane combination order as the fiber
// path's collectives, lanes that did not take part reading as zero bits), and each thread
// reads its result (the next region). The translator accepts the call only when the source's
// definitions of these helpers are the ones this re-expresses.

template <class... A> struct arguments;
template <class A0, class A1> struct arguments<A0, A1> {
  A0 a0;
  A1 a1;
};
template <class A0, class A1, class A2, class A3> struct arguments<A0, A1, A2, A3> {
  A0 a0;
  A1 a1;
  A2 a2;
  A3 a3;
};
template <class A0, class A1, class A2, class A3, class A4, class A5> struct arguments<A0, A1, A2, A3, A4, A5> {
  A0 a0;
  A1 a1;
  A2 a2;
  A3 a3;
  A4 a4;
  A5 a5;
};
template <class... A> inline arguments<std::decay_t<A>...> arguments_of(A&&... a) { return {a...}; }

// One call site of a group helper: each thread's arguments and result, and whether it took part.
template <class Arguments, class Result> struct group_call {
  Arguments* calls;
  Result* results;
  bool* joined;

  group_call(void* call_storage, void* result_storage, void* joined_storage)
      : calls(static_cast<Arguments*>(call_storage)),
        results(static_cast<Result*>(result_storage)),
        joined(static_cast<bool*>(joined_storage)) {}
  ETM_REGION_UNCHECKED void reset(uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) joined[i] = false;
  }
  ETM_REGION_UNCHECKED void publish(uint32_t index, const Arguments& a) {
    ::new (static_cast<void*>(calls + index)) Arguments(a);
    joined[index] = true;
  }
};

// One simdgroup's operands of a collective; lanes without one read as zero bits.
template <class T> struct simdgroup_operands {
  T values[32];
  uint64_t active = 0;
  uint32_t first = 0;  // the first active lane: whose view a uniform result is computed in

  void set(uint32_t lane, const T& value) {
    if (!active) first = lane;
    values[lane] = value;
    active |= uint64_t(1) << lane;
  }
  etm_msl::lane_values view() const {
    return {reinterpret_cast<const unsigned char*>(values), sizeof(T), active, first, 32u};
  }
  T lane(uint32_t l) const { return etm_msl::lane_value<T>(view(), l); }
};

// What c10's simd helpers compute over the active lanes (the same value in every lane).
template <class T> using c10_simd_operand_t = std::conditional_t<std::is_same_v<T, ::bfloat>, float, T>;

template <class T, class Combine> inline T c10_simd_reduce(const simdgroup_operands<T>& v, Combine combine) {
  using S = c10_simd_operand_t<T>;
  simdgroup_operands<S> s;
  for (uint32_t l = 0; l < 32; ++l)
    if ((v.active >> l) & 1u) s.set(l, S(v.values[l]));
  return T(etm_msl::reduce_lanes<S>(s.view(), false, combine));
}

// c10's 64-bit reductions: a shuffle_and_fill_down tree (a source lane that did not take part
// gives zero bits; past the end, the filling value of the lane that many positions from the
// start, zero if that lane did not take part), then lane 0's value.
template <class T, class Step> inline T c10_shuffle_tree(const simdgroup_operands<T>& v, T fill, Step step) {
  T current[32];
  for (uint32_t l = 0; l < 32; ++l) current[l] = v.lane(l);
  for (ushort i = 32 / 2; i > 0; i /= 2) {
    T next[32];
    for (uint32_t l = 0; l < 32; ++l) {
      next[l] = current[l];
      if (!((v.active >> l) & 1u)) continue;
      const uint32_t source = l + i;
      const bool source_active = ((v.active >> (source % 32u)) & 1u) != 0;
      const T other = source < 32u ? (source_active ? current[source] : T(0)) : (source_active ? fill : T(0));
      next[l] = step(current[l], other);
    }
    for (uint32_t l = 0; l < 32; ++l) current[l] = next[l];
  }
  return (v.active & 1u) ? current[0] : T(0);
}

template <class T> inline T c10_simd_sum(const simdgroup_operands<T>& v) {
  if constexpr (std::is_same_v<T, long>) {
    return c10_shuffle_tree(v, T(0), [](T a, T b) { return T(a + b); });
  } else {
    return c10_simd_reduce(v, etm_msl::plus<c10_simd_operand_t<T>>{});
  }
}

// c10's simd_prod: the product in lane order (bfloat through float); long as a
// shuffle_and_fill_down tree whose filling value is 0, as c10 writes it. c10's complex
// simd_prod gives each lane its own value, which a reduction for the whole simdgroup cannot
// stand for.
template <class T> inline T c10_simd_prod(const simdgroup_operands<T>& v) {
  static_assert(!std::is_same_v<T, ::float2> && !std::is_same_v<T, ::half2>,
                "c10::metal::threadgroup_prod of complex values runs on fibers");
  if constexpr (std::is_same_v<T, long>) {
    return c10_shuffle_tree(v, T(0), [](T a, T b) { return T(a * b); });
  } else {
    return c10_simd_reduce(v, etm_msl::times<c10_simd_operand_t<T>>{});
  }
}

template <class T> inline bool c10_any_nan(const simdgroup_operands<T>& v) {
  for (uint32_t l = 0; l < 32; ++l)
    if (((v.active >> l) & 1u) && ::metal::isnan(v.values[l])) return true;
  return false;
}

// c10's simd_max (maximum) or simd_min: NaN from any lane wins for floating types.
template <class T> inline T c10_simd_extreme(const simdgroup_operands<T>& v, bool maximum) {
  if constexpr (::metal::is_floating_point_v<T>) {
    if (c10_any_nan(v)) return ::metal::numeric_limits<T>::quiet_NaN();
  }
  if constexpr (std::is_same_v<T, long>) {
    if (maximum) return c10_shuffle_tree(v, ::metal::numeric_limits<long>::lowest(), [](T a, T b) { return T(::metal::max(a, b)); });
    return c10_shuffle_tree(v, ::metal::numeric_limits<long>::max(), [](T a, T b) { return T(::metal::min(a, b)); });
  } else {
    static_assert(::metal::is_floating_point_v<T> || (::metal::is_integral_v<T> && sizeof(T) != 8),
                  "c10::metal::simd_max/min take floating types, long and integers up to 32 bits");
    using S = c10_simd_operand_t<T>;
    if (maximum) return c10_simd_reduce(v, [](const S& a, const S& b) { return S(::metal::max(a, b)); });
    return c10_simd_reduce(v, [](const S& a, const S& b) { return S(::metal::min(a, b)); });
  }
}

// c10's simd_argmax / simd_argmin with an index value: the extreme and the index value of the
// lowest lane holding it (NaN counts as holding it), broadcast from that lane.
template <class T, class I>
inline void c10_simd_arg_extreme(const simdgroup_operands<T>& v, const simdgroup_operands<I>& indices, bool maximum,
                                 T* extreme, I* index) {
  const T rc = c10_simd_extreme(v, maximum);
  simdgroup_operands<bool> votes;
  for (uint32_t l = 0; l < 32; ++l) {
    if (!((v.active >> l) & 1u)) continue;
    bool vote = v.values[l] == rc;
    if constexpr (::metal::is_floating_point_v<T>) vote = vote || ::metal::isnan(v.values[l]);
    votes.set(l, vote);
  }
  const ulong bits = etm_msl::ballot_lanes(votes.view(), false, nullptr);
  const ushort lane = static_cast<ushort>(::metal::ctz(bits));
  *extreme = rc;
  *index = indices.lane(uint32_t(lane) % 32u);
}

inline constexpr uint32_t kC10SimdgroupSize = 32;

// Calls every thread that took part with (index, its arguments), in thread order.
template <class Call, class F> inline void for_each_joined(const Call& call, uint32_t count, F f) {
  for (uint32_t i = 0; i < count; ++i)
    if (call.joined[i]) f(i, call.calls[i]);
}

// Where a thread's call of a two-stage reduction puts its value: idx and size.
struct c10_position {
  unsigned idx;
  unsigned size;
};

// c10's two-stage reductions over Channels (data, value) pairs side by side (threadgroup_sum2
// has two): each simdgroup reduces each channel's values, the lane with idx % 32 == 0 stores its
// simdgroup's value at data[idx / 32]; with more than 32 values, the threads with
// idx < ceil(size / 32) reduce those (every channel read before any is stored, as c10 does) and
// idx 0 stores the totals at data[0]. data(a, c), value(a, c) and position(a) read a thread's
// arguments; the caller sets the results from data[0].
template <class V, uint32_t Channels, class A, class R, class Data, class Value, class Position, class Reduce>
inline void c10_two_stage(group_call<A, R>& call, uint32_t count, Data data, Value value, Position position,
                          Reduce reduce) {
  const uint32_t groups = (count + 31u) / 32u;
  for (uint32_t g = 0; g < groups; ++g) {
    simdgroup_operands<V> operands[Channels];
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      if (!call.joined[g * 32 + l]) continue;
      for (uint32_t c = 0; c < Channels; ++c) operands[c].set(l, static_cast<V>(value(call.calls[g * 32 + l], c)));
    }
    if (!operands[0].active) continue;
    V rc[Channels];
    for (uint32_t c = 0; c < Channels; ++c) rc[c] = reduce(operands[c]);
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      if (!call.joined[g * 32 + l]) continue;
      const A& a = call.calls[g * 32 + l];
      const c10_position p = position(a);
      if (p.idx % kC10SimdgroupSize != 0) continue;
      for (uint32_t c = 0; c < Channels; ++c) data(a, c)[p.idx / kC10SimdgroupSize] = rc[c];
    }
  }
  auto second_stage = [&](const A& a) {
    const c10_position p = position(a);
    return p.size > kC10SimdgroupSize && p.idx < (p.size + kC10SimdgroupSize - 1) / kC10SimdgroupSize;
  };
  V* totals = static_cast<V*>(__builtin_alloca(sizeof(V) * groups * Channels));
  for (uint32_t g = 0; g < groups; ++g) {
    simdgroup_operands<V> operands[Channels];
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      const uint32_t i = g * 32 + l;
      if (!call.joined[i] || !second_stage(call.calls[i])) continue;
      const unsigned idx = position(call.calls[i]).idx;
      for (uint32_t c = 0; c < Channels; ++c) operands[c].set(l, V(data(call.calls[i], c)[idx]));
    }
    if (!operands[0].active) continue;
    for (uint32_t c = 0; c < Channels; ++c) totals[g * Channels + c] = reduce(operands[c]);
  }
  for_each_joined(call, count, [&](uint32_t i, const A& a) {
    if (!second_stage(a) || position(a).idx != 0) return;
    for (uint32_t c = 0; c < Channels; ++c) data(a, c)[0] = totals[(i / 32u) * Channels + c];
  });
}

// threadgroup_sum / _prod / _max / _min (data, val, idx, size): every thread returns data[0].
template <class R, class A0, class A1, class A2, class A3, class Reduce>
inline void c10_one_value_two_stage(group_call<arguments<A0, A1, A2, A3>, R>& call, uint32_t count, Reduce reduce) {
  using A = arguments<A0, A1, A2, A3>;
  c10_two_stage<R, 1>(
      call, count, [](const A& a, uint32_t) { return a.a0; }, [](const A& a, uint32_t) { return a.a1; },
      [](const A& a) { return c10_position{unsigned(a.a2), unsigned(a.a3)}; }, reduce);
  for_each_joined(call, count, [&](uint32_t i, const A& a) { call.results[i] = a.a0[0]; });
}

template <class R, class A0, class A1, class A2, class A3>
inline void c10_threadgroup_sum(group_call<arguments<A0, A1, A2, A3>, R>& call, uint32_t count) {
  c10_one_value_two_stage(call, count, [](const simdgroup_operands<R>& v) { return c10_simd_sum(v); });
}
template <class R, class A0, class A1, class A2, class A3>
inline void c10_threadgroup_prod(group_call<arguments<A0, A1, A2, A3>, R>& call, uint32_t count) {
  c10_one_value_two_stage(call, count, [](const simdgroup_operands<R>& v) { return c10_simd_prod(v); });
}
template <class R, class A0, class A1, class A2, class A3>
inline void c10_threadgroup_max(group_call<arguments<A0, A1, A2, A3>, R>& call, uint32_t count) {
  c10_one_value_two_stage(call, count, [](const simdgroup_operands<R>& v) { return c10_simd_extreme(v, true); });
}
template <class R, class A0, class A1, class A2, class A3>
inline void c10_threadgroup_min(group_call<arguments<A0, A1, A2, A3>, R>& call, uint32_t count) {
  c10_one_value_two_stage(call, count, [](const simdgroup_operands<R>& v) { return c10_simd_extreme(v, false); });
}

// threadgroup_sum2 (data_a, data_b, val_a, val_b, idx, size): two sums side by side; every
// thread returns {data_a[0], data_b[0]}.
template <class R, class A0, class A1, class A2, class A3, class A4, class A5>
inline void c10_threadgroup_sum2(group_call<arguments<A0, A1, A2, A3, A4, A5>, R>& call, uint32_t count) {
  using A = arguments<A0, A1, A2, A3, A4, A5>;
  using V = std::decay_t<decltype(std::declval<R&>()[0])>;
  c10_two_stage<V, 2>(
      call, count, [](const A& a, uint32_t c) { return c == 0 ? a.a0 : a.a1; },
      [](const A& a, uint32_t c) { return c == 0 ? V(a.a2) : V(a.a3); },
      [](const A& a) { return c10_position{unsigned(a.a4), unsigned(a.a5)}; },
      [](const simdgroup_operands<V>& v) { return c10_simd_sum(v); });
  for_each_joined(call, count, [&](uint32_t i, const A& a) { call.results[i] = R{a.a0[0], a.a1[0]}; });
}

// threadgroup_argmax / _argmin (arg_data, idx_data, val, idx_val, idx, size): each simdgroup's
// extreme and its index value; with at most 32 values every thread returns its simdgroup's
// index value; otherwise as the two-stage reductions, over (value, index value) pairs.
template <class R, class A0, class A1, class T, class I, class A4, class A5>
inline void c10_arg_two_stage(group_call<arguments<A0, A1, T, I, A4, A5>, R>& call, uint32_t count, bool maximum) {
  using A = arguments<A0, A1, T, I, A4, A5>;
  const uint32_t groups = (count + 31u) / 32u;
  for (uint32_t g = 0; g < groups; ++g) {
    simdgroup_operands<T> values;
    simdgroup_operands<I> indices;
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      if (!call.joined[g * 32 + l]) continue;
      values.set(l, call.calls[g * 32 + l].a2);
      indices.set(l, call.calls[g * 32 + l].a3);
    }
    if (!values.active) continue;
    T extreme;
    I index;
    c10_simd_arg_extreme(values, indices, maximum, &extreme, &index);
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      const uint32_t i = g * 32 + l;
      if (!call.joined[i]) continue;
      const A& a = call.calls[i];
      const unsigned idx = a.a4, size = a.a5;
      if (size <= kC10SimdgroupSize) {
        call.results[i] = index;
        continue;
      }
      if (idx % kC10SimdgroupSize == 0) {
        a.a0[idx / kC10SimdgroupSize] = extreme;
        a.a1[idx / kC10SimdgroupSize] = index;
      }
    }
  }
  auto in_stages = [](const A& a) { return unsigned(a.a5) > kC10SimdgroupSize; };
  auto second_stage = [&](const A& a) {
    const unsigned idx = a.a4, size = a.a5;
    return in_stages(a) && idx < (size + kC10SimdgroupSize - 1) / kC10SimdgroupSize;
  };
  I* totals = static_cast<I*>(__builtin_alloca(sizeof(I) * groups));
  for (uint32_t g = 0; g < groups; ++g) {
    simdgroup_operands<T> values;
    simdgroup_operands<I> indices;
    for (uint32_t l = 0; l < 32 && g * 32 + l < count; ++l) {
      const uint32_t i = g * 32 + l;
      if (!call.joined[i] || !second_stage(call.calls[i])) continue;
      const unsigned idx = call.calls[i].a4;
      values.set(l, call.calls[i].a0[idx]);
      indices.set(l, call.calls[i].a1[idx]);
    }
    if (!values.active) continue;
    T extreme;
    c10_simd_arg_extreme(values, indices, maximum, &extreme, &totals[g]);
  }
  for_each_joined(call, count, [&](uint32_t i, const A& a) {
    if (second_stage(a) && unsigned(a.a4) == 0) a.a1[0] = totals[i / 32u];
  });
  for_each_joined(call, count, [&](uint32_t i, const A& a) {
    if (in_stages(a)) call.results[i] = a.a1[0];
  });
}

template <class R, class A0, class A1, class A2, class A3, class A4, class A5>
inline void c10_threadgroup_argmax(group_call<arguments<A0, A1, A2, A3, A4, A5>, R>& call, uint32_t count) {
  c10_arg_two_stage(call, count, true);
}
template <class R, class A0, class A1, class A2, class A3, class A4, class A5>
inline void c10_threadgroup_argmin(group_call<arguments<A0, A1, A2, A3, A4, A5>, R>& call, uint32_t count) {
  c10_arg_two_stage(call, count, false);
}

// The c10 helpers over (data, size) whose every thread computes the same value from the whole
// of data[0 .. size): computed once per run of threads with the same arguments.
template <class R, class A0, class A1, class Compute>
inline void c10_whole_data_call(group_call<arguments<A0, A1>, R>& call, uint32_t count, Compute compute) {
  bool computed = false;
  arguments<A0, A1> last{};
  R result{};
  for_each_joined(call, count, [&](uint32_t i, const arguments<A0, A1>& a) {
    if (!computed || a.a0 != last.a0 || unsigned(a.a1) != unsigned(last.a1)) {
      result = compute(a.a0, unsigned(a.a1));
      last = a;
      computed = true;
    }
    call.results[i] = result;
  });
}

// A whole-data result, computed by `together` beside other groups' requests when the executor
// runs this group side by side with others (etm_lane.h's group requests), else by `alone`.
// Instrumented kernels (counters, access checks) always compute alone.
template <class R, class T, class Alone>
inline R awaited(const T* data, unsigned size, etm_cpu_group_compute together, Alone alone) {
#if defined(ETM_CPU_GROUP_ARENA) && !ETM_CPU_INSTRUMENTED
  R result;
  etm_cpu_group_request request{together, data, size, &result};
  unsigned char* const arena = ETM_CPU_GROUP_ARENA;
  if (etm_cpu_group_batch.await_request && etm_cpu_group_batch.await_request(&request)) {
    ETM_CPU_GROUP_ARENA = arena;  // other groups ran on this OS thread meanwhile
    return result;
  }
#else
  (void)together;
#endif
  return alone(data, size);
}

// One element of c10's welford_reduce: x, at position idx, folded into the mean m and m2.
inline void c10_welford_step(float& m, float& m2, float x, unsigned idx) {
  const float delta = x - m;
  m += delta / (idx + 1);
  m2 += delta * (x - m);
}

// threadgroup_welford_reduce of one group's data[0 .. size): mean, m2 and count, in order.
template <class R, class T> inline R c10_welford_reduce_alone(const T* data, unsigned size) {
  float m = data[0];
  float m2 = 0;
  for (unsigned idx = 1; idx < size; ++idx) c10_welford_step(m, m2, data[idx], idx);
  return R(m, m2, size);
}

// The same for several groups: kChains chains side by side, each the same operations in the
// same order as alone (so the same bits); lanes past the last request repeat the first.
inline constexpr uint32_t kChains = 8;
template <class R, class T>
void c10_welford_reduce_together(etm_cpu_group_request* const* requests, uint32_t count) {
  for (uint32_t first = 0; first < count; first += kChains) {
    const uint32_t chains = count - first < kChains ? count - first : kChains;
    const T* data[kChains];
    float m[kChains], m2[kChains];
    unsigned common = UINT32_MAX;
    for (uint32_t c = 0; c < kChains; ++c) {
      const etm_cpu_group_request& r = *requests[first + (c < chains ? c : 0)];
      data[c] = static_cast<const T*>(r.data);
      m[c] = data[c][0];
      m2[c] = 0;
      common = r.size < common ? r.size : common;
    }
    for (unsigned idx = 1; idx < common; ++idx)
      for (uint32_t c = 0; c < kChains; ++c) c10_welford_step(m[c], m2[c], data[c][idx], idx);
    for (uint32_t c = 0; c < chains; ++c) {
      const etm_cpu_group_request& r = *requests[first + c];
      for (unsigned idx = common > 1 ? common : 1; idx < r.size; ++idx) c10_welford_step(m[c], m2[c], data[c][idx], idx);
      *static_cast<R*>(r.result) = R(m[c], m2[c], r.size);
    }
  }
}

// threadgroup_welford_reduce (data, size): mean, m2 and count of data[0 .. size) in order.
template <class R, class A0, class A1>
inline void c10_threadgroup_welford_reduce(group_call<arguments<A0, A1>, R>& call, uint32_t count) {
  using T = std::remove_cv_t<std::remove_pointer_t<A0>>;
  c10_whole_data_call(call, count, [](const T* data, unsigned size) {
    return awaited<R>(data, size, &c10_welford_reduce_together<R, T>, &c10_welford_reduce_alone<R, T>);
  });
}

// threadgroup_welford_combine (data, size): the (mean, m2, weight) triples data[0 .. size)
// folded in order with c10's welford_combine, re-expressed here (float literals: the kernel's
// own are float too).
template <class R, class A0, class A1>
inline void c10_threadgroup_welford_combine(group_call<arguments<A0, A1>, R>& call, uint32_t count) {
  c10_whole_data_call(call, count, [](const auto* data, unsigned size) {
    R combined = data[0];
    for (unsigned idx = 1; idx < size; ++idx) {
      const auto& b = data[idx];
      const float delta = b.x - combined.x;
      const float new_weight = combined.z + b.z;
      const auto w2_over_w = new_weight != 0 ? b.z / new_weight : 0.0f;
      combined = R(combined.x + delta * w2_over_w, combined.y + b.y + delta * delta * combined.z * w2_over_w,
                   new_weight);
    }
    return combined;
  });
}

// A value of type T where only its type matters: the region function deduces the types of
// `auto` variables from their initialisers in unevaluated statement expressions, where the
// per-thread names stand for values of their frame types. Never defined, never called.
template <class T> T& stand_in();

// Frames for `count` threads in caller-provided storage (alloca'd by the region function),
// value-initialised: zeros for frames of trivial types, in one memset.
template <class Frame> ETM_REGION_UNCHECKED inline Frame* construct_frames(void* storage, uint32_t count) {
  Frame* frames = static_cast<Frame*>(storage);
  if constexpr (std::is_trivially_default_constructible_v<Frame>) {
    __builtin_memset(storage, 0, sizeof(Frame) * count);
  } else {
    for (uint32_t i = 0; i < count; ++i) ::new (static_cast<void*>(frames + i)) Frame();
  }
  return frames;
}

// The region function keeps its frames on the worker's stack; larger groups of frames go to
// the fiber path instead (the entry point declines them).
inline constexpr size_t kMaxFrameBytes = size_t(1) << 20;

}  // namespace etm_regions
