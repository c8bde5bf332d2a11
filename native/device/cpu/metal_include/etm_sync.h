// metal_compute synchronization: mem_flags, threadgroup_barrier, simdgroup_barrier, and the
// call-site identity that keeps different SIMD-group collectives apart.
#pragma once

#include "etm_base.h"

namespace metal {
enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint(a) | uint(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(uint(a) & uint(b)); }

// Blocks until every thread of the threadgroup that has not returned arrives. All threads of a
// threadgroup share the host's memory, so the executor's rendezvous is also the memory fence.
inline void threadgroup_barrier(mem_flags) { etm_cpu_threadgroup_barrier(); }
}  // namespace metal

namespace etm_msl {

// Identity of a SIMD-group collective's call site. The executor only compares it: the lanes
// that reach the same site take part in one collective. It is a 64-bit hash of (file, line,
// column) of the MSL call, plus a step number for collectives that exchange more than once.
// Default arguments evaluate at the caller, so the identity survives inlining.
inline const void* site_id(const char* file, unsigned line, unsigned column, unsigned step) {
  uint64_t h = uint64_t(uintptr_t(file));
  h ^= uint64_t(line) * 0x9e3779b97f4a7c15ull;
  h ^= uint64_t(column) * 0xc2b2ae3d27d4eb4full;
  h ^= uint64_t(step) * 0x165667b19e3779f9ull;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return reinterpret_cast<const void*>(uintptr_t(h | 1u));
}

struct call_site {
  const char* file;
  unsigned line;
  unsigned column;
  const void* id(unsigned step = 0) const { return site_id(file, line, column, step); }
};

}  // namespace etm_msl

// The trailing parameter of every SIMD-group function: the caller's source location.
#if __cplusplus >= 202002L
#define ETM_CALL_SITE_PARAMETER std::source_location etm_location = std::source_location::current()
#define ETM_CALL_SITE \
  (etm_msl::call_site{etm_location.file_name(), unsigned(etm_location.line()), unsigned(etm_location.column())})
// Passes the caller's site on to another SIMD-group function.
#define ETM_CALL_SITE_ARGUMENTS etm_location
#else
// C++17 has no column: two collectives on one line share a site, which only matters when
// lanes diverge between them.
#define ETM_CALL_SITE_PARAMETER const char *etm_file = __builtin_FILE(), unsigned etm_line = __builtin_LINE()
#define ETM_CALL_SITE (etm_msl::call_site{etm_file, etm_line, 0u})
#define ETM_CALL_SITE_ARGUMENTS etm_file, etm_line
#endif

namespace etm_msl {
// The calling lane's view of a collective: every lane's published value and the active mask.
inline etm_cpu_simd_view exchange(const void* site, const void* value, uint32_t size) {
  etm_cpu_simd_view view;
  etm_cpu_simd_exchange(site, value, size, &view);
  return view;
}
}  // namespace etm_msl

namespace metal {
// A SIMD-group barrier is a collective that exchanges nothing.
inline void simdgroup_barrier(mem_flags, ETM_CALL_SITE_PARAMETER) {
  etm_msl::exchange(ETM_CALL_SITE.id(), nullptr, 0);
}
}  // namespace metal
