// Support code included first by every translated kernel translation unit (before
// <metal_stdlib>, whose address-space macros must come after all system headers).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "etm_cpu_kernel_abi.h"

#define ETM_CPU_KERNEL_EXPORT __attribute__((visibility("default")))

// The compiler driver builds either one kernel (ETM_CPU_KERNEL_INDEX) or, to check a whole
// library, every kernel (ETM_CPU_ALL_KERNELS).
#ifndef ETM_CPU_ALL_KERNELS
#define ETM_CPU_ALL_KERNELS 0
#endif
#ifndef ETM_CPU_KERNEL_INDEX
#define ETM_CPU_KERNEL_INDEX (-1)
#endif
#define ETM_CPU_KERNEL_SELECTED(index) (ETM_CPU_ALL_KERNELS || ETM_CPU_KERNEL_INDEX == (index))
// Set (to 1) for objects built with device-memory traffic counters.
#ifndef ETM_CPU_COUNTERS
#define ETM_CPU_COUNTERS 0
#endif

namespace etm_cpu_kernel {

// The arena of the threadgroup the calling OS thread runs now. Fibers of one group share
// their OS thread, and a worker finishes a group before it starts the next.
inline thread_local unsigned char* group_arena = nullptr;

#if ETM_CPU_COUNTERS
// The traffic counters of the dispatch the calling OS thread runs now (etm_cpu_counters.h).
inline thread_local etm_cpu_counters* dispatch_counters = nullptr;
#endif

// Called first by every kernel entry: the group's arena (and the dispatch's counters) for
// the calling OS thread. With counters it is not instrumented (its own loads must not be
// counted) and opaque to the optimiser (noipa): otherwise its loads of launch->counters
// move into the instrumented caller, where they are checked against the previous
// dispatch's table before this one's is installed.
#if ETM_CPU_COUNTERS
__attribute__((no_sanitize_address, noipa)) inline void enter_group(const etm_cpu_launch* launch,
                                                                    const etm_cpu_group* group) {
  group_arena = group->arena;
  dispatch_counters = launch->counters;
}
#else
inline void enter_group(const etm_cpu_launch*, const etm_cpu_group* group) { group_arena = group->arena; }
#endif

// Static threadgroup variables get fixed offsets when the object is loaded: each
// instantiated (type, declaration site) pair reserves its bytes once.
inline uint64_t& static_threadgroup_end() {
  static uint64_t end = 0;
  return end;
}

inline uint64_t reserve_threadgroup_bytes(uint64_t size, uint64_t alignment) {
  uint64_t& end = static_threadgroup_end();
  const uint64_t offset = (end + alignment - 1) / alignment * alignment;
  end = offset + size;
  return offset;
}

template <class Variable, unsigned Site>
struct threadgroup_slot {
  static const uint64_t offset;
};

template <class Variable, unsigned Site>
const uint64_t threadgroup_slot<Variable, Site>::offset =
    reserve_threadgroup_bytes(sizeof(Variable), alignof(Variable));

template <class Variable, unsigned Site>
inline Variable& threadgroup_variable() {
  return *reinterpret_cast<Variable*>(group_arena + threadgroup_slot<Variable, Site>::offset);
}

template <class Pointer>
inline Pointer bind_pointer(void* address) {
  return reinterpret_cast<Pointer>(address);
}

template <class Reference>
inline Reference bind_reference(void* address) {
  return *reinterpret_cast<std::remove_reference_t<Reference>*>(address);
}

template <class Reference>
constexpr uint64_t referenced_size() {
  return sizeof(std::remove_reference_t<Reference>);
}

}  // namespace etm_cpu_kernel

#if ETM_CPU_COUNTERS
#include "etm_cpu_counters.h"
#endif

// Not inline: the entry point must be emitted even when nothing in the TU calls it.
extern "C" ETM_CPU_KERNEL_EXPORT uint64_t etm_kernel_static_threadgroup_bytes(void) {
  return etm_cpu_kernel::static_threadgroup_end();
}
