// Support for kernels the translator turned into barrier regions (msl_barrier_regions.cpp):
// one call runs a whole threadgroup, the code between barriers as loops over its threads,
// with every thread's values that live across a barrier in a frame of its own. A SIMD-group
// matrix operation runs once per simdgroup between two regions: it reads and writes the
// 2-element fragments of all 32 lanes straight from their frames (the lanes' copies of one
// variable lie `stride` bytes apart) and multiplies as plain 8x8 matrices. A simd_* / quad_*
// collective becomes two regions: every thread that reaches it publishes its operand into the
// call site's lane array, then every such thread computes its result from the array
// (reductions once per simdgroup).
#pragma once

#include <new>

#include "etm_simd.h"
#include "etm_simdgroup_matrix.h"

namespace etm_regions {
using metal::ulong2;

// The simdgroup a matrix operation runs for: its active lanes (not returned, inside the
// group), the lane whose frame the call's arguments were evaluated in, and the frame size.
struct simdgroup {
  uint64_t active;
  uint32_t leader_lane;
  size_t stride;

  template <class T> T& of_lane(T& leader_copy, uint32_t lane) const {
    const ptrdiff_t offset = (ptrdiff_t(lane) - ptrdiff_t(leader_lane)) * ptrdiff_t(stride);
    return *reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(&leader_copy) + offset);
  }
  bool has(uint32_t lane) const { return ((active >> lane) & 1u) != 0; }
};

// Lanes [base, base + 32) of the group that are inside it and have not returned.
inline uint64_t active_lanes(const bool* done, uint32_t base, uint32_t count) {
  uint64_t active = 0;
  const uint32_t end = count - base < 32u ? count - base : 32u;
  for (uint32_t lane = 0; lane < end; ++lane)
    if (!done[base + lane]) active |= uint64_t(1) << lane;
  return active;
}

// All 64 elements of a matrix from the lanes' fragments; inactive lanes read as zero, as on
// the fiber path.
template <class T>
inline void gather(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& m, float out[8][8]) {
  if (g.active == 0xffffffffu) {  // a full simdgroup: no lane to skip
#pragma GCC unroll 32
    for (uint32_t lane = 0; lane < 32; ++lane) {
      const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
      const auto& fragment = g.of_lane(m, lane).elements;
      out[at.row][at.column] = float(fragment.x);
      out[at.row][at.column + 1] = float(fragment.y);
    }
    return;
  }
  for (uint32_t lane = 0; lane < 32; ++lane) {
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    const bool in = g.has(lane);
    const auto& fragment = g.of_lane(m, in ? lane : g.leader_lane).elements;
    out[at.row][at.column] = in ? float(fragment.x) : 0.0f;
    out[at.row][at.column + 1] = in ? float(fragment.y) : 0.0f;
  }
}

template <class T>
inline void scatter(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& m, const float in[8][8]) {
#pragma GCC unroll 32
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    auto& fragment = g.of_lane(m, lane).elements;
    fragment.x = T(in[at.row][at.column]);
    fragment.y = T(in[at.row][at.column + 1]);
  }
}

// c += a * b, row by row: a row of c stays in registers while k runs (the order of the fiber
// path: c, then k = 0..7).
inline void multiply_rows(const float a[8][8], const float b[8][8], float c[8][8]) {
  typedef float row_vector __attribute__((vector_size(32)));
  row_vector rows_of_b[8];
  __builtin_memcpy(rows_of_b, b, sizeof rows_of_b);
  for (int row = 0; row < 8; ++row) {
    row_vector sum;
    __builtin_memcpy(&sum, c[row], sizeof sum);
    for (int k = 0; k < 8; ++k) sum += a[row][k] * rows_of_b[k];
    __builtin_memcpy(c[row], &sum, sizeof sum);
  }
}

// d = a * b + c in float, summed in the same order as the fiber path (c, then k = 0..7).
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(const simdgroup& g, metal::simdgroup_matrix<TD, 8, 8>& d,
                                          metal::simdgroup_matrix<TA, 8, 8>& a,
                                          metal::simdgroup_matrix<TB, 8, 8>& b,
                                          metal::simdgroup_matrix<TC, 8, 8>& c) {
  float ma[8][8], mb[8][8], mc[8][8];
  gather(g, a, ma);
  gather(g, b, mb);
  gather(g, c, mc);
  multiply_rows(ma, mb, mc);
  scatter(g, d, mc);
}

template <class TD, class TA, class TB>
inline void simdgroup_multiply(const simdgroup& g, metal::simdgroup_matrix<TD, 8, 8>& d,
                               metal::simdgroup_matrix<TA, 8, 8>& a, metal::simdgroup_matrix<TB, 8, 8>& b) {
  float ma[8][8], mb[8][8], mc[8][8] = {};
  gather(g, a, ma);
  gather(g, b, mb);
  multiply_rows(ma, mb, mc);
  scatter(g, d, mc);
}

template <class T, class S>
inline void simdgroup_load(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& destination, const S* source,
                           ulong elements_per_row = 8, ulong2 matrix_origin = ulong2(0ul, 0ul),
                           bool transpose_matrix = false) {
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    auto& fragment = g.of_lane(destination, lane).elements;
    for (uint32_t k = 0; k < 2; ++k) {
      const ulong row = at.row, column = at.column + k;
      const ulong source_row = transpose_matrix ? column : row;
      const ulong source_column = transpose_matrix ? row : column;
      fragment[int(k)] = T(source[(matrix_origin.y + source_row) * elements_per_row + matrix_origin.x + source_column]);
    }
  }
}

template <class T, class D>
inline void simdgroup_store(const simdgroup& g, metal::simdgroup_matrix<T, 8, 8>& matrix, D* destination,
                            ulong elements_per_row = 8, ulong2 matrix_origin = ulong2(0ul, 0ul),
                            bool transpose_matrix = false) {
  for (uint32_t lane = 0; lane < 32; ++lane) {
    if (!g.has(lane)) continue;
    const etm_msl::fragment_position at = etm_msl::fragment_of_lane(lane);
    const auto& fragment = g.of_lane(matrix, lane).elements;
    for (uint32_t k = 0; k < 2; ++k) {
      const ulong row = at.row, column = at.column + k;
      const ulong target_row = transpose_matrix ? column : row;
      const ulong target_column = transpose_matrix ? row : column;
      destination[(matrix_origin.y + target_row) * elements_per_row + matrix_origin.x + target_column] =
          D(fragment[int(k)]);
    }
  }
}

// One collective call site: each thread's published operand (64 bytes apart) and, per
// simdgroup, the lanes that published. The region before the collective resets it thread by
// thread (reset, then publish when the thread takes part); the region after reads it.
struct collective {
  unsigned char* slots;
  uint64_t* joined;
  uint32_t cached_base = UINT32_MAX;  // the simdgroup whose reduction `cached` holds
  alignas(16) unsigned char cached[64];

  collective(void* slot_storage, void* joined_storage)
      : slots(static_cast<unsigned char*>(slot_storage)), joined(static_cast<uint64_t*>(joined_storage)) {}

  void reset(uint32_t index) {
    if ((index & 31u) == 0) joined[index >> 5] = 0;
    if (index == 0) cached_base = UINT32_MAX;
  }
  template <class T> void publish(uint32_t index, const T& value) {
    static_assert(sizeof(T) <= 64, "a SIMD-group collective exchanges at most 64 bytes per lane");
    __builtin_memcpy(slots + size_t(index) * 64, static_cast<const void*>(&value), sizeof(T));
    joined[index >> 5] |= uint64_t(1) << (index & 31u);
  }
  etm_msl::lane_values lanes(uint32_t index) const {
    const uint32_t base = index & ~31u;
    return {slots + size_t(base) * 64, 64, joined[index >> 5], index & 31u, 32u};
  }
};
inline constexpr size_t kCollectiveSlotBytes = 64;

// A simdgroup-wide reduction, computed by the first of its threads to ask.
template <class T, class Combine> inline T reduce(collective& c, uint32_t index, bool quad, Combine combine) {
  if (quad) return etm_msl::reduce_lanes<T>(c.lanes(index), true, combine);
  const uint32_t base = index & ~31u;
  if (c.cached_base != base) {
    const T result = etm_msl::reduce_lanes<T>(c.lanes(index), false, combine);
    __builtin_memcpy(c.cached, static_cast<const void*>(&result), sizeof(T));
    c.cached_base = base;
  }
  T result;
  __builtin_memcpy(static_cast<void*>(&result), c.cached, sizeof(T));
  return result;
}

// The region form of each simd_ / quad_ collective: the operand comes from the lane array,
// the other arguments as in Metal.
#define ETM_REGION_COLLECTIVES(prefix, quad, vote_type)                                               \
  template <class T> inline T prefix##sum(collective& c, uint32_t i) {                                \
    return reduce<T>(c, i, quad, etm_msl::plus<T>{});                                                 \
  }                                                                                                   \
  template <class T> inline T prefix##product(collective& c, uint32_t i) {                            \
    return reduce<T>(c, i, quad, etm_msl::times<T>{});                                                \
  }                                                                                                   \
  template <class T> inline T prefix##min(collective& c, uint32_t i) {                                \
    return reduce<T>(c, i, quad, [](const T& a, const T& b) { return T(::metal::min(a, b)); });      \
  }                                                                                                   \
  template <class T> inline T prefix##max(collective& c, uint32_t i) {                                \
    return reduce<T>(c, i, quad, [](const T& a, const T& b) { return T(::metal::max(a, b)); });      \
  }                                                                                                   \
  template <class T> inline T prefix##and(collective& c, uint32_t i) {                                \
    return reduce<T>(c, i, quad, etm_msl::bitwise<T, etm_msl::bit_and>{});                           \
  }                                                                                                   \
  template <class T> inline T prefix##or(collective& c, uint32_t i) {                                 \
    return reduce<T>(c, i, quad, etm_msl::bitwise<T, etm_msl::bit_or>{});                            \
  }                                                                                                   \
  template <class T> inline T prefix##xor(collective& c, uint32_t i) {                                \
    return reduce<T>(c, i, quad, etm_msl::bitwise<T, etm_msl::bit_xor>{});                           \
  }                                                                                                   \
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

// Frames for `count` threads in caller-provided storage (alloca'd by the region function).
template <class Frame> inline Frame* construct_frames(void* storage, uint32_t count) {
  Frame* frames = static_cast<Frame*>(storage);
  for (uint32_t i = 0; i < count; ++i) ::new (static_cast<void*>(frames + i)) Frame();
  return frames;
}

// The region function keeps its frames on the worker's stack; larger groups of frames go to
// the fiber path instead (the entry point declines them).
inline constexpr size_t kMaxFrameBytes = size_t(1) << 20;

}  // namespace etm_regions
