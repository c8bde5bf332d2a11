// Support code included first by every translated kernel translation unit (before
// <metal_stdlib>, whose address-space macros must come after all system headers).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "etm_cpu_kernel_abi.h"

#define ETM_CPU_KERNEL_EXPORT __attribute__((visibility("default")))

// Set (to 1) for objects built with device-memory traffic counters.
#ifndef ETM_CPU_COUNTERS
#define ETM_CPU_COUNTERS 0
#endif
// Set (to 1) for objects built with access checks (ETMETAL_VALIDATE=1).
#ifndef ETM_CPU_VALIDATE
#define ETM_CPU_VALIDATE 0
#endif
// Both build the kernel with the compiler's access instrumentation (etm_cpu_counters.h).
#define ETM_CPU_INSTRUMENTED (ETM_CPU_COUNTERS || ETM_CPU_VALIDATE)
// Set (to 1), with -ffixed-r15, where the access checks keep their state in r15 (below).
#ifndef ETM_CPU_VALIDATION_STATE_IN_R15
#define ETM_CPU_VALIDATION_STATE_IN_R15 0
#endif

namespace etm_cpu_kernel {

// The arena of the threadgroup the calling OS thread runs now. Fibers of one group share
// their OS thread; a worker that runs several groups side by side (etm_lane.h's group
// requests) switches between them only inside etm_regions::awaited, which restores it.
inline thread_local unsigned char* group_arena = nullptr;
#define ETM_CPU_GROUP_ARENA ::etm_cpu_kernel::group_arena

#if ETM_CPU_COUNTERS
// The traffic counters of the dispatch the calling OS thread runs now (etm_cpu_counters.h).
inline thread_local etm_cpu_counters* dispatch_counters = nullptr;
#endif
#if ETM_CPU_VALIDATE
// The access checks of the dispatch the calling OS thread runs now, the launch and group data
// its entry reads (no kernel memory: etm_cpu_counters.h lets those reads pass unchecked), the
// address of an atomic object the next instrumented access goes to (with clang's
// instrumentation etm_atomic.h sets it just before the builtin, so that access is checked as
// atomic), the thread of the group the
// loop or barrier-region code runs for (ETM_CPU_THREAD_UNKNOWN on fibers), and the checks of the
// worker running the group (etm_cpu_validation::worker).
struct ValidationState {
  etm_cpu_validation* table;
  const etm_cpu_launch* launch;
  const etm_cpu_group* group;
  uintptr_t pending_atomic;
  uint32_t thread;
  void* worker;
  uintptr_t stack_top;  // the entry point's frame: the kernel's stack lies below it
};

// Where every access hook finds it. g++ on x86-64 (the compiler driver defines
// ETM_CPU_VALIDATION_STATE_IN_R15 and reserves the register with -ffixed-r15): in r15, which
// each entry point points at the state in its own frame, saving the caller's value (callee-saved
// in the ABI: code outside the object keeps it intact, a fiber switch saves it per fiber). A
// thread-local costs a __tls_get_addr call per access in a shared object. Code of the object
// that runs outside an entry point (static initialisers, at load) finds r15 holding whatever its
// caller left: the hooks look only while a dispatch of the object runs (running_dispatches,
// which the executor raises around each dispatch through etm_kernel_running_dispatches, so
// that a fault that abandons entry points leaves it balanced), and entry points set r15 before
// their first checked access. Nothing of the object runs outside its entry points during a
// dispatch (the executor's questions below are unchecked; static initialisers ran at load).
#if ETM_CPU_VALIDATION_STATE_IN_R15
inline uint32_t running_dispatches = 0;
// Through asm, not a global register variable: g++ drops the stores to one declared in the
// precompiled header.
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline ValidationState* validation_state_register() {
  ValidationState* state;
  __asm__ volatile("mov %%r15, %0" : "=r"(state));
  return state;
}
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void set_validation_state_register(
    ValidationState* state) {
  __asm__ volatile("mov %0, %%r15" : : "r"(state));
}
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline ValidationState* validation_state() {
  return __atomic_load_n(&running_dispatches, __ATOMIC_RELAXED) ? validation_state_register() : nullptr;
}
#else
inline thread_local ValidationState validation_state_storage = {nullptr, nullptr, nullptr, 0, ETM_CPU_THREAD_UNKNOWN,
                                                                nullptr, 0};
// The variable's address once: g++ would redo its TLS lookup after branches.
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline ValidationState* validation_state() {
  ValidationState* state = &validation_state_storage;
  __asm__("" : "+r"(state));
  return state;
}
#endif

// What an entry point keeps for the group it runs: the state (in r15's variant) and the
// caller's r15. Written only by enter_group and leave_group (unchecked).
struct group_scope {
#if ETM_CPU_VALIDATION_STATE_IN_R15
  ValidationState state;
  ValidationState* saved;
#endif
};
#else
struct group_scope {};
#endif

// The frame address an entry point hands enter_group (only the access checks use it).
#if ETM_CPU_VALIDATE
#define ETM_CPU_ENTRY_FRAME __builtin_frame_address(0)
#else
#define ETM_CPU_ENTRY_FRAME nullptr
#endif

// Called first by every kernel entry: the group's arena (and the dispatch's counters or
// checks) for the calling OS thread. Instrumented builds keep it uninstrumented (its own
// loads must not be counted) and opaque to the optimiser (noipa): otherwise its loads of
// launch->counters move into the instrumented caller, where they are checked against the
// previous dispatch's table before this one's is installed.
#if ETM_CPU_INSTRUMENTED
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noipa)) inline void enter_group(const etm_cpu_launch* launch,
                                                                    const etm_cpu_group* group, group_scope* scope,
                                                                    const void* entry_frame) {
  group_arena = group->arena;
#if ETM_CPU_COUNTERS
  dispatch_counters = launch->counters;
#endif
#if ETM_CPU_VALIDATE
#if ETM_CPU_VALIDATION_STATE_IN_R15
  scope->saved = validation_state_register();
  set_validation_state_register(&scope->state);
  ValidationState& state = scope->state;
  state.pending_atomic = 0;
#else
  (void)scope;
  ValidationState& state = *validation_state();
#endif
  state.table = launch->validation;
  state.launch = launch;
  state.group = group;
  state.thread = ETM_CPU_THREAD_UNKNOWN;
  state.worker = state.table ? state.table->worker(state.table->state) : nullptr;
  state.stack_top = reinterpret_cast<uintptr_t>(entry_frame);
#else
  (void)scope;
  (void)entry_frame;
#endif
}
#else
inline void enter_group(const etm_cpu_launch*, const etm_cpu_group* group, group_scope*, const void*) {
  group_arena = group->arena;
}
#endif

// Called last by every kernel entry that returns: the caller's r15 back.
#if ETM_CPU_VALIDATION_STATE_IN_R15
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noipa)) inline void leave_group(group_scope* scope) {
  set_validation_state_register(scope->saved);
}
#else
inline void leave_group(group_scope*) {}
#endif

// The loop and barrier-region forms say which thread their code runs for next, and the
// barrier-region form which barriers and SIMD-group collectives the group passes (only the
// access checks need to know). Opaque to the optimiser, so no thread's accesses merge with
// another's (the checks must see each thread's own).
#if ETM_CPU_VALIDATE
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noipa)) inline void enter_thread(uint32_t thread) {
  validation_state()->thread = thread;
}
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noipa)) inline void pass_barrier(uint32_t live) {
  const etm_cpu_validation* table = validation_state()->table;
  if (table) table->barrier(table->state, live);
}
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noipa)) inline void pass_simd_sync(uint32_t first, uint64_t lanes) {
  const ValidationState* state = validation_state();
  if (state->table) state->table->simd_sync(state->worker, first, lanes);
}
#else
inline void enter_thread(uint32_t) {}
inline void pass_barrier(uint32_t) {}
inline void pass_simd_sync(uint32_t, uint64_t) {}
#endif

// Checked kernels read the group's values (thread positions, sizes) from a copy of their own:
// the opaque enter_thread calls make them reload what `group` points to for every thread, and
// each such load would be an access check; the copy's fields stay in registers.
#if ETM_CPU_VALIDATE
#define ETM_CPU_LOCAL_GROUP(group)               \
  const etm_cpu_group group##_copy = *(group); \
  group = &group##_copy;
#else
#define ETM_CPU_LOCAL_GROUP(group)
#endif

// Static threadgroup variables get fixed offsets when the object is loaded: each
// instantiated (type, declaration site) pair reserves its bytes once.
inline uint64_t& static_threadgroup_end() {
  static uint64_t end = 0;
  return end;
}

#if ETM_CPU_VALIDATE
// With access checks every variable is followed by bytes that belong to none, so that an
// access running off one variable is not inside the next; the executor learns the
// variables' ranges from etm_kernel_static_threadgroup_ranges.
constexpr uint64_t kThreadgroupRedzoneBytes = 16;
constexpr uint32_t kMaxRecordedThreadgroupVariables = 256;
inline uint64_t static_threadgroup_ranges[2 * kMaxRecordedThreadgroupVariables];
inline uint32_t static_threadgroup_variable_count = 0;
#else
constexpr uint64_t kThreadgroupRedzoneBytes = 0;
#endif

inline uint64_t reserve_threadgroup_bytes(uint64_t size, uint64_t alignment) {
  uint64_t& end = static_threadgroup_end();
  const uint64_t offset = (end + alignment - 1) / alignment * alignment;
  end = offset + size + kThreadgroupRedzoneBytes;
#if ETM_CPU_VALIDATE
  const uint32_t n = static_threadgroup_variable_count++;
  if (n < kMaxRecordedThreadgroupVariables) {
    static_threadgroup_ranges[2 * n] = offset;
    static_threadgroup_ranges[2 * n + 1] = offset + size;
  }
#endif
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

#if ETM_CPU_INSTRUMENTED
#include "etm_cpu_counters.h"
#endif

// Not inline: the entry point must be emitted even when nothing in the TU calls it. These two
// are the executor's questions, no kernel code: unchecked.
extern "C" ETM_CPU_KERNEL_EXPORT __attribute__((ETM_CPU_NOT_INSTRUMENTED)) uint64_t etm_kernel_static_threadgroup_bytes(void) {
  return etm_cpu_kernel::static_threadgroup_end();
}

#if ETM_CPU_VALIDATE
extern "C" ETM_CPU_KERNEL_EXPORT __attribute__((ETM_CPU_NOT_INSTRUMENTED)) uint32_t etm_kernel_static_threadgroup_ranges(const uint64_t** ranges) {
  *ranges = etm_cpu_kernel::static_threadgroup_ranges;
  const uint32_t count = etm_cpu_kernel::static_threadgroup_variable_count;
  return count <= etm_cpu_kernel::kMaxRecordedThreadgroupVariables ? count : UINT32_MAX;
}
#endif

#if ETM_CPU_VALIDATION_STATE_IN_R15
extern "C" ETM_CPU_KERNEL_EXPORT __attribute__((ETM_CPU_NOT_INSTRUMENTED)) uint32_t* etm_kernel_running_dispatches(void) {
  return &etm_cpu_kernel::running_dispatches;
}
#endif
