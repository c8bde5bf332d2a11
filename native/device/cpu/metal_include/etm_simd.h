// metal_simdgroup: the simd_* and quad_* collectives.
//
// Each collective is one call to the executor's etm_cpu_simd_exchange: the lane publishes its
// operand, gets back every lane's operand plus the mask of lanes that took part, and computes
// its own result locally. Lanes that did not take part (returned, waiting at a barrier or at a
// different collective) read as zero bits, which is what Apple GPUs give for a shuffle from an
// inactive lane in practice (c10's 64-bit simd_sum relies on it). Reductions and scans combine
// the active lanes only. quad_* functions work on groups of four consecutive lanes.
#pragma once

#include "etm_math.h"
#include "etm_integer.h"
#include "etm_sync.h"

namespace etm_msl {

// The lane functions read only the lanes' published values, no kernel memory: builds
// instrumented for counters or access checks keep them out of the instrumentation (one call
// per collective instead of a checked access per lane).
#if ETM_CPU_COUNTERS || ETM_CPU_VALIDATE
#define ETM_CPU_UNINSTRUMENTED __attribute__((ETM_CPU_NOT_INSTRUMENTED))
#else
#define ETM_CPU_UNINSTRUMENTED
#endif

// What a collective computes from: every lane's published value (lane i at values + i *
// stride) and the lanes that took part. The fiber path gets it from the executor's exchange;
// the barrier-region path (etm_barrier_regions.h) from lane arrays it filled before.
struct lane_values {
  const unsigned char* values;
  size_t stride;
  uint64_t active;  // bit i set: lane i took part
  uint32_t lane;    // the caller's lane
  uint32_t width;   // lanes in the simdgroup (32)
};

// The lanes a collective combines: the whole simdgroup, or the caller's quad.
struct lane_range {
  uint32_t base;
  uint32_t size;
};
inline lane_range simdgroup_range(const lane_values& view) { return {0u, view.width}; }
inline lane_range quad_range(const lane_values& view) { return {view.lane & ~3u, 4u}; }

ETM_CPU_UNINSTRUMENTED inline bool is_active(const lane_values& view, uint32_t lane) {
  return lane < 64 && ((view.active >> lane) & 1u) != 0;
}

// Lanes that did not take part read as zero bits.
template <class T> ETM_CPU_UNINSTRUMENTED inline T lane_value(const lane_values& view, uint32_t lane) {
  T value;
  if (is_active(view, lane)) {
    __builtin_memcpy(static_cast<void*>(&value), view.values + size_t(lane) * view.stride, sizeof(T));
  } else {
    __builtin_memset(static_cast<void*>(&value), 0, sizeof(T));
  }
  return value;
}

template <class T> inline lane_values publish(const call_site& site, const T& value) {
  static_assert(sizeof(T) <= 64, "a SIMD-group collective exchanges at most 64 bytes per lane");
  const etm_cpu_simd_view view = exchange(site.id(), &value, uint32_t(sizeof(T)));
  return {view.values, sizeof(T), view.active, view.lane, view.width};
}

template <class T, class Combine> ETM_CPU_UNINSTRUMENTED inline T reduce_lanes(const lane_values& view, bool quad, Combine combine) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  T result = lane_value<T>(view, view.lane);  // the caller is active, so at least one lane contributes
  bool first = true;
  for (uint32_t lane = range.base; lane < range.base + range.size; ++lane) {
    if (!is_active(view, lane)) continue;
    const T value = lane_value<T>(view, lane);
    result = first ? value : T(combine(result, value));
    first = false;
  }
  return result;
}
template <class T, class Combine>
inline T reduce(const call_site& site, const T& data, bool quad, Combine combine) {
  return reduce_lanes<T>(publish(site, data), quad, combine);
}

// Scan over the active lanes below (exclusive) or up to (inclusive) the caller.
template <class T, class Combine>
ETM_CPU_UNINSTRUMENTED inline T scan_lanes(const lane_values& view, bool quad, bool inclusive, T identity, Combine combine) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  T result = identity;
  const uint32_t end = inclusive ? view.lane + 1 : view.lane;
  for (uint32_t lane = range.base; lane < end; ++lane)
    if (is_active(view, lane)) result = T(combine(result, lane_value<T>(view, lane)));
  return result;
}
template <class T, class Combine>
inline T scan(const call_site& site, const T& data, bool quad, bool inclusive, T identity, Combine combine) {
  return scan_lanes<T>(publish(site, data), quad, inclusive, identity, combine);
}

enum class shuffle_kind { index, up, down, exclusive_or, rotate_up, rotate_down };

// Shuffles whose source lies outside the lane range keep the caller's value (up, down, xor);
// rotations wrap around; an index shuffle takes the index modulo the range.
template <class T>
ETM_CPU_UNINSTRUMENTED inline T shuffle_lanes(const lane_values& view, bool quad, shuffle_kind kind, uint32_t amount) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  const uint32_t position = view.lane - range.base;
  uint32_t source = 0;
  switch (kind) {
    case shuffle_kind::index:
      source = amount % range.size;
      break;
    case shuffle_kind::up:
      if (position < amount) return lane_value<T>(view, view.lane);
      source = position - amount;
      break;
    case shuffle_kind::down:
      if (position + amount >= range.size) return lane_value<T>(view, view.lane);
      source = position + amount;
      break;
    case shuffle_kind::exclusive_or:
      source = position ^ amount;
      if (source >= range.size) return lane_value<T>(view, view.lane);
      break;
    case shuffle_kind::rotate_up:
      source = (position + range.size - amount % range.size) % range.size;
      break;
    case shuffle_kind::rotate_down:
      source = (position + amount) % range.size;
      break;
  }
  return lane_value<T>(view, range.base + source);
}
template <class T>
inline T shuffle(const call_site& site, const T& data, bool quad, shuffle_kind kind, uint32_t amount) {
  return shuffle_lanes<T>(publish(site, data), quad, kind, amount);
}

// shuffle_and_fill: the range is split into vectors of `modulo` lanes; a lane whose source falls
// past its vector's end (down) or before its start (up) takes filling_data from the lane that
// many positions into the vector from the other end.
template <class T> struct data_and_fill {
  T data;
  T fill;
};
template <class T>
ETM_CPU_UNINSTRUMENTED inline T shuffle_and_fill_lanes(const lane_values& view, bool quad, bool down, uint32_t delta, uint32_t modulo) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  const uint32_t width = (modulo == 0 || modulo > range.size) ? range.size : modulo;
  const uint32_t position = view.lane - range.base;
  const uint32_t vector_base = range.base + position - position % width;
  const uint32_t offset = position % width;
  if (down) {
    if (offset + delta < width) return lane_value<data_and_fill<T>>(view, vector_base + offset + delta).data;
    return lane_value<data_and_fill<T>>(view, vector_base + (offset + delta - width) % width).fill;
  }
  if (offset >= delta) return lane_value<data_and_fill<T>>(view, vector_base + offset - delta).data;
  return lane_value<data_and_fill<T>>(view, vector_base + (offset + width - delta % width) % width).fill;
}
template <class T>
inline T shuffle_and_fill(const call_site& site, const T& data, const T& filling_data, bool quad, bool down,
                          uint32_t delta, uint32_t modulo) {
  return shuffle_and_fill_lanes<T>(publish(site, data_and_fill<T>{data, filling_data}), quad, down, delta, modulo);
}

template <class T> ETM_CPU_UNINSTRUMENTED inline T broadcast_first_lanes(const lane_values& view, bool quad) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  for (uint32_t lane = range.base; lane < range.base + range.size; ++lane)
    if (is_active(view, lane)) return lane_value<T>(view, lane);
  return lane_value<T>(view, view.lane);
}
template <class T> inline T broadcast_first(const call_site& site, const T& data, bool quad) {
  return broadcast_first_lanes<T>(publish(site, data), quad);
}

// Bit i of the result: lane range.base + i is active and voted true.
ETM_CPU_UNINSTRUMENTED inline uint64_t ballot_lanes(const lane_values& view, bool quad, uint64_t* active_mask) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  uint64_t bits = 0, active = 0;
  for (uint32_t lane = range.base; lane < range.base + range.size; ++lane) {
    if (!is_active(view, lane)) continue;
    active |= uint64_t(1) << (lane - range.base);
    if (lane_value<bool>(view, lane)) bits |= uint64_t(1) << (lane - range.base);
  }
  if (active_mask) *active_mask = active;
  return bits;
}
inline uint64_t ballot(const call_site& site, bool vote, bool quad, uint64_t* active_mask) {
  return ballot_lanes(publish(site, vote), quad, active_mask);
}

// The caller's lane, from a collective that exchanges nothing.
inline uint32_t current_lane(const call_site& site) { return exchange(site.id(), nullptr, 0).lane; }

inline bool is_first_active_lanes(const lane_values& view, bool quad) {
  const lane_range range = quad ? quad_range(view) : simdgroup_range(view);
  for (uint32_t lane = range.base; lane < range.base + range.size; ++lane)
    if (is_active(view, lane)) return lane == view.lane;
  return false;
}
inline bool is_first_active(const call_site& site, bool quad) {
  const etm_cpu_simd_view view = exchange(site.id(), nullptr, 0);
  return is_first_active_lanes({view.values, 0, view.active, view.lane, view.width}, quad);
}

struct vote_access;

// Bitwise reductions combine the bit patterns, also of floating-point values.
template <class T> struct bits_of {
  using type = T;
};
template <> struct bits_of<float> {
  using type = uint32_t;
};
template <> struct bits_of<_Float16> {
  using type = uint16_t;
};
template <> struct bits_of<bfloat> {
  using type = uint16_t;
};
template <class T, class Op> struct bitwise {
  T operator()(const T& a, const T& b) const {
    using B = typename bits_of<T>::type;
    const B result = B(Op()(__builtin_bit_cast(B, a), __builtin_bit_cast(B, b)));
    return __builtin_bit_cast(T, result);
  }
};
struct bit_and {
  template <class B> B operator()(const B& a, const B& b) const { return B(a & b); }
};
struct bit_or {
  template <class B> B operator()(const B& a, const B& b) const { return B(a | b); }
};
struct bit_xor {
  template <class B> B operator()(const B& a, const B& b) const { return B(a ^ b); }
};

template <class T> struct plus {
  T operator()(const T& a, const T& b) const { return a + b; }
};
template <class T> struct times {
  T operator()(const T& a, const T& b) const { return a * b; }
};

}  // namespace etm_msl

namespace metal {

// The result of simd_ballot / simd_active_threads_mask: bit i is lane i.
class simd_vote {
 public:
  typedef ulong vote_t;
  explicit constexpr simd_vote(vote_t value = 0) : bits_(value), active_(0xffffffffu) {}
  explicit constexpr operator vote_t() const { return bits_; }
  // True when every active lane voted true (for a vote built from a value: all 32 lanes).
  constexpr bool all() const { return (bits_ & active_) == active_; }
  constexpr bool any() const { return bits_ != 0; }

 private:
  friend struct etm_msl::vote_access;
  vote_t bits_;
  vote_t active_;
};

// The same for quad_ballot: bit i is lane i of the caller's quad.
class quad_vote {
 public:
  typedef ushort vote_t;
  explicit constexpr quad_vote(vote_t value = 0) : bits_(value), active_(0xf) {}
  explicit constexpr operator vote_t() const { return bits_; }
  constexpr bool all() const { return (bits_ & active_) == active_; }
  constexpr bool any() const { return bits_ != 0; }

 private:
  friend struct etm_msl::vote_access;
  vote_t bits_;
  vote_t active_;
};

}  // namespace metal

namespace etm_msl {
struct vote_access {
  template <class Vote> static Vote make(uint64_t bits, uint64_t active) {
    Vote vote{typename Vote::vote_t(bits)};
    vote.active_ = typename Vote::vote_t(active);
    return vote;
  }
};
}  // namespace etm_msl

// Defines the simd_ or quad_ (prefix) family; `quad` selects the lane range.
#define ETM_LANE_COLLECTIVES(prefix, quad, vote_type)                                              \
  template <class T> inline T prefix##sum(T data, ETM_CALL_SITE_PARAMETER) {                      \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, etm_msl::plus<T>{});                          \
  }                                                                                                \
  template <class T> inline T prefix##product(T data, ETM_CALL_SITE_PARAMETER) {                  \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, etm_msl::times<T>{});                         \
  }                                                                                                \
  template <class T> inline T prefix##min(T data, ETM_CALL_SITE_PARAMETER) {                      \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, [](const T& a, const T& b) { return T(::metal::min(a, b)); }); \
  }                                                                                                \
  template <class T> inline T prefix##max(T data, ETM_CALL_SITE_PARAMETER) {                      \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, [](const T& a, const T& b) { return T(::metal::max(a, b)); }); \
  }                                                                                                \
  template <class T> inline T prefix##and(T data, ETM_CALL_SITE_PARAMETER) {                      \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, etm_msl::bitwise<T, etm_msl::bit_and>{});   \
  }                                                                                                \
  template <class T> inline T prefix##or(T data, ETM_CALL_SITE_PARAMETER) {                       \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, etm_msl::bitwise<T, etm_msl::bit_or>{});    \
  }                                                                                                \
  template <class T> inline T prefix##xor(T data, ETM_CALL_SITE_PARAMETER) {                      \
    return etm_msl::reduce(ETM_CALL_SITE, data, quad, etm_msl::bitwise<T, etm_msl::bit_xor>{});   \
  }                                                                                                \
  template <class T> inline T prefix##prefix_inclusive_sum(T data, ETM_CALL_SITE_PARAMETER) {     \
    return etm_msl::scan(ETM_CALL_SITE, data, quad, true, T(0), etm_msl::plus<T>{});                \
  }                                                                                                \
  template <class T> inline T prefix##prefix_exclusive_sum(T data, ETM_CALL_SITE_PARAMETER) {     \
    return etm_msl::scan(ETM_CALL_SITE, data, quad, false, T(0), etm_msl::plus<T>{});               \
  }                                                                                                \
  template <class T> inline T prefix##prefix_inclusive_product(T data, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::scan(ETM_CALL_SITE, data, quad, true, T(1), etm_msl::times<T>{});               \
  }                                                                                                \
  template <class T> inline T prefix##prefix_exclusive_product(T data, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::scan(ETM_CALL_SITE, data, quad, false, T(1), etm_msl::times<T>{});              \
  }                                                                                                \
  template <class T> inline T prefix##shuffle(T data, ushort lane, ETM_CALL_SITE_PARAMETER) {     \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::index, lane);         \
  }                                                                                                \
  template <class T> inline T prefix##broadcast(T data, ushort lane, ETM_CALL_SITE_PARAMETER) {   \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::index, lane);         \
  }                                                                                                \
  template <class T> inline T prefix##shuffle_up(T data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::up, delta);          \
  }                                                                                                \
  template <class T> inline T prefix##shuffle_down(T data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::down, delta);        \
  }                                                                                                \
  template <class T> inline T prefix##shuffle_xor(T data, ushort mask, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::exclusive_or, mask); \
  }                                                                                                \
  template <class T> inline T prefix##shuffle_rotate_up(T data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::rotate_up, delta);   \
  }                                                                                                \
  template <class T> inline T prefix##shuffle_rotate_down(T data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle(ETM_CALL_SITE, data, quad, etm_msl::shuffle_kind::rotate_down, delta); \
  }                                                                                                \
  template <class T>                                                                               \
  inline T prefix##shuffle_and_fill_up(T data, T filling_data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle_and_fill(ETM_CALL_SITE, data, filling_data, quad, false, delta, 0);    \
  }                                                                                                \
  template <class T>                                                                               \
  inline T prefix##shuffle_and_fill_up(T data, T filling_data, ushort delta, ushort modulo,        \
                                       ETM_CALL_SITE_PARAMETER) {                                  \
    return etm_msl::shuffle_and_fill(ETM_CALL_SITE, data, filling_data, quad, false, delta, modulo); \
  }                                                                                                \
  template <class T>                                                                               \
  inline T prefix##shuffle_and_fill_down(T data, T filling_data, ushort delta, ETM_CALL_SITE_PARAMETER) { \
    return etm_msl::shuffle_and_fill(ETM_CALL_SITE, data, filling_data, quad, true, delta, 0);     \
  }                                                                                                \
  template <class T>                                                                               \
  inline T prefix##shuffle_and_fill_down(T data, T filling_data, ushort delta, ushort modulo,      \
                                         ETM_CALL_SITE_PARAMETER) {                                \
    return etm_msl::shuffle_and_fill(ETM_CALL_SITE, data, filling_data, quad, true, delta, modulo); \
  }                                                                                                \
  template <class T> inline T prefix##broadcast_first(T data, ETM_CALL_SITE_PARAMETER) {          \
    return etm_msl::broadcast_first(ETM_CALL_SITE, data, quad);                                    \
  }                                                                                                \
  inline vote_type prefix##ballot(bool expr, ETM_CALL_SITE_PARAMETER) {                            \
    uint64_t active = 0;                                                                           \
    const uint64_t bits = etm_msl::ballot(ETM_CALL_SITE, expr, quad, &active);                     \
    return etm_msl::vote_access::make<vote_type>(bits, active);                                    \
  }                                                                                                \
  inline vote_type prefix##active_threads_mask(ETM_CALL_SITE_PARAMETER) {                          \
    uint64_t active = 0;                                                                           \
    etm_msl::ballot(ETM_CALL_SITE, true, quad, &active);                                           \
    return etm_msl::vote_access::make<vote_type>(active, active);                                  \
  }                                                                                                \
  inline bool prefix##all(bool expr, ETM_CALL_SITE_PARAMETER) {                                    \
    uint64_t active = 0;                                                                           \
    return etm_msl::ballot(ETM_CALL_SITE, expr, quad, &active) == active;                          \
  }                                                                                                \
  inline bool prefix##any(bool expr, ETM_CALL_SITE_PARAMETER) {                                    \
    return etm_msl::ballot(ETM_CALL_SITE, expr, quad, nullptr) != 0;                               \
  }                                                                                                \
  inline bool prefix##is_first(ETM_CALL_SITE_PARAMETER) {                                          \
    return etm_msl::is_first_active(ETM_CALL_SITE, quad);                                          \
  }

namespace metal {
ETM_LANE_COLLECTIVES(simd_, false, simd_vote)
ETM_LANE_COLLECTIVES(quad_, true, quad_vote)
}  // namespace metal

#undef ETM_LANE_COLLECTIVES
