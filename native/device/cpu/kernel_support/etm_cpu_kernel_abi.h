// The data a translated kernel's entry points receive from the CPU device's executor.
// Shared by the executor (C++) and every generated kernel translation unit, which gets this
// file from the headers embedded in libetmetal. Plain C so the layout is fixed.
#pragma once

#include <stdint.h>

#include "../metal_include/etm_not_instrumented.h"

#ifdef __cplusplus
extern "C" {
#endif

// Device-memory traffic of one dispatch, counted per binding (ETMETAL_COUNTERS=1; see
// etm_cpu_counters.h). A binding is the byte range [begin, begin + length) of a buffer bound
// with set_buffer; the kernel adds the bytes it loads from and stores to it.
typedef struct etm_cpu_binding {
  uintptr_t begin;
  uint64_t length;
  uint32_t index;  // [[buffer(index)]]
  uint64_t bytes_read;
  uint64_t bytes_written;
} etm_cpu_binding;

typedef struct etm_cpu_counters {
  etm_cpu_binding* bindings;
  uint32_t binding_count;
} etm_cpu_counters;

// Access checks of one dispatch (ETMETAL_VALIDATE=1; see etm_cpu_counters.h). The kernel
// settles most instrumented loads and stores itself: one wholly inside one of `ranges` (the
// bindings, and launch data the entry reads) is fine, and so is one neither in the group's
// threadgroup memory (`threadgroup_span` bytes from the group's arena) nor within `reach` bytes
// of a range (the stack, the kernel's constants). Every other one goes to `check` before it
// happens, with the address of the code that makes it (`site`, 0 when unknown) and the thread
// of the group it runs for when the kernel's own loops know it (the loop and barrier-region
// forms; ETM_CPU_THREAD_UNKNOWN on fibers, whose executor knows). Atomic accesses are marked,
// since they never race. Accesses to threadgroup memory go to `check_threadgroup` instead, with
// their offset in it and what `worker` returned when the group's kernel entry started (the
// checks of the worker that runs the group, etm_cpu_threadgroup_checks.h's WorkerChecks; null:
// none), unless the kernel settled them itself with those checks. Barrier-region code also reports the
// group's synchronisation: each threadgroup_barrier the group passes (`live`: the threads that
// have not returned), and the SIMD-group collectives threads pass (threads first + i for each
// bit i of `lanes`).
enum { ETM_CPU_ACCESS_LOAD = 0, ETM_CPU_ACCESS_STORE = 1, ETM_CPU_ACCESS_ATOMIC = 2 };
#define ETM_CPU_THREAD_UNKNOWN UINT32_MAX

typedef struct etm_cpu_range {
  uintptr_t begin;
  uint64_t length;
  uint64_t reach;  // bytes on either side where an access is out of this range's bounds
} etm_cpu_range;

// Hints per dispatch: for a hash of the instrumented code's address, the range its last
// access fell in (an access site usually keeps to one binding).
#define ETM_CPU_RANGE_HINTS 64

typedef struct etm_cpu_validation {
  const etm_cpu_range* ranges;
  uint32_t range_count;
  uint8_t range_hints[ETM_CPU_RANGE_HINTS];  // indices into ranges (all 0 at first)
  uint64_t threadgroup_span;
  void* state;
  void (*check)(void* state, uintptr_t address, uint64_t size, uint32_t kind, uintptr_t site, uint32_t thread);
  void* (*worker)(void* state);
  void (*check_threadgroup)(void* worker, uint64_t offset, uint64_t size, uint32_t kind, uintptr_t site,
                            uint32_t thread);
  void (*barrier)(void* state, uint32_t live);
  void (*simd_sync)(void* worker, uint32_t first, uint64_t lanes);
} etm_cpu_validation;

// One dispatch, shared by all threadgroups.
typedef struct etm_cpu_launch {
  // Argument table: [[buffer(i)]] -> buffers[i].
  void* const* buffers;
  // [[threadgroup(i)]] -> group arena + dynamic_threadgroup_offsets[i].
  const uint32_t* dynamic_threadgroup_offsets;
  uint32_t threads_per_group[3];  // dispatch_threads_per_threadgroup
  uint32_t grid[3];               // threads_per_grid
  uint32_t groups[3];             // threadgroups_per_grid
  etm_cpu_counters* counters;     // null unless the kernel was built with counters
  etm_cpu_validation* validation; // null unless the kernel was built with access checks
} etm_cpu_launch;

// One threadgroup. Edge groups of dispatch_threads grids are smaller than requested.
typedef struct etm_cpu_group {
  uint32_t position[3];  // threadgroup_position_in_grid
  uint32_t size[3];      // threads_per_threadgroup of this group
  uint32_t origin[3];    // thread_position_in_grid of its first thread
  uint32_t thread_count;
  unsigned char* arena;  // threadgroup memory: static variables, then dynamic blocks
} etm_cpu_group;

// Entry points a kernel object exports for the kernel with entry index N:
//   void etm_kernel_loop_N(const etm_cpu_launch*, const etm_cpu_group*)
//       runs every thread of the group, one after the other (no barriers or SIMD calls);
//   void etm_kernel_thread_N(const etm_cpu_launch*, const etm_cpu_group*, uint32_t index)
//       runs the thread with thread_index_in_threadgroup == index (on a fiber);
//   int etm_kernel_regions_N(const etm_cpu_launch*, const etm_cpu_group*)
//       runs the whole group as barrier regions (only kernels with that form; unless built
//       with ETM_CPU_NO_REGIONS); returns 1 without running anything when it declines the group;
//   const char etm_kernel_execution_note_N[]
//       why the kernel has no barrier-region form ("barrier regions" when it has one);
//   void etm_kernel_argument_sizes_N(uint64_t* sizes)
//       bytes read through each reference parameter (0 for the others), in parameter order;
// and once per object:
//   uint64_t etm_kernel_static_threadgroup_bytes(void)
//   uint32_t etm_kernel_static_threadgroup_ranges(const uint64_t** ranges)
//       (only with access checks) the [begin, end) arena offsets of its static threadgroup
//       variables, as pairs; returns the number of variables, or UINT32_MAX when too many
//       were recorded
//   uint32_t* etm_kernel_running_dispatches(void)
//       (only with access checks whose state lives in r15) the object's count of running
//       dispatches: the executor adds 1 (atomically) while it runs one, so that the checks
//       trust r15 only then
typedef void (*etm_cpu_loop_entry)(const etm_cpu_launch*, const etm_cpu_group*);
typedef void (*etm_cpu_thread_entry)(const etm_cpu_launch*, const etm_cpu_group*, uint32_t);
typedef int (*etm_cpu_regions_entry)(const etm_cpu_launch*, const etm_cpu_group*);
typedef void (*etm_cpu_argument_sizes_entry)(uint64_t*);
typedef uint64_t (*etm_cpu_static_threadgroup_bytes_entry)(void);
typedef uint32_t (*etm_cpu_static_threadgroup_ranges_entry)(const uint64_t**);
typedef uint32_t* (*etm_cpu_running_dispatches_entry)(void);

#ifdef __cplusplus
}
#endif
