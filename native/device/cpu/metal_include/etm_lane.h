// The two calls a translated kernel makes into the CPU device's executor. Everything else
// in the emulated Metal standard library is plain code; only these need the scheduler.
//
// They reach the executor through a table of function pointers that the kernel object itself
// defines (etm_cpu_lanes) and the executor fills in when it loads the object, so a kernel
// object has no undefined symbols of the runtime's: it works however the runtime was loaded
// (RTLD_LOCAL, several runtimes in one process), and the runtime exports no internals for it.
// etm_cpu_lanes is an inline variable, emitted only into objects whose code calls a lane
// function: its presence also tells the executor that the kernel needs fibers.
// Plain C layout so compiled kernel objects never depend on the runtime's C++ ABI.
#pragma once

#include <stdint.h>

extern "C" {

struct etm_cpu_simd_view {
  const unsigned char* values;  // `width` slots of `size` bytes, lane i at i * size
  uint64_t active;              // bit i set: lane i took part
  uint32_t lane;                // the caller's lane (thread_index_in_simdgroup)
  uint32_t width;               // lanes in the simdgroup (32)
};

struct etm_cpu_lane_calls {
  // threadgroup_barrier: returns once every thread of the calling threadgroup that has not
  // returned has arrived here.
  void (*threadgroup_barrier)(void);
  // A SIMD-group collective. The calling lane publishes `size` (<= 64) bytes of `value` and
  // returns once every lane of its simdgroup that is still running has either arrived at
  // the same `site` or is parked elsewhere (at a threadgroup barrier or a different site).
  // The lanes that arrived at `site` are the active ones; slots of all other lanes read as
  // zero bits. `out` stays valid until the caller's next call into the executor.
  void (*simd_exchange)(const void* site, const void* value, uint32_t size,
                        struct etm_cpu_simd_view* out);
};

// Exported from the kernel object (the executor finds it with dlsym). g++ must be told
// -fno-gnu-unique, or every kernel object in the process would share one table.
__attribute__((visibility("default"))) inline struct etm_cpu_lane_calls etm_cpu_lanes = {nullptr, nullptr};

// Barrier-region kernels whose groups each compute one long serial chain over their data
// (c10's threadgroup_welford_reduce) hand it to the executor, which runs several groups of a
// worker side by side (each on its own stack) and computes their chains interleaved: one
// chain is bound by its latency, several fill the pipeline. A group's request names the
// kernel's function that computes `count` requests of its kind together.
struct etm_cpu_group_request;
typedef void (*etm_cpu_group_compute)(struct etm_cpu_group_request* const* requests, uint32_t count);
struct etm_cpu_group_request {
  etm_cpu_group_compute compute;
  const void* data;
  uint32_t size;
  void* result;
};

struct etm_cpu_group_calls {
  // Returns 1 once `request` was computed beside other groups' requests, 0 (nothing done)
  // when the calling group does not run in such a batch: the caller computes it itself.
  int (*await_request)(struct etm_cpu_group_request* request);
};

// Exported like etm_cpu_lanes; present only in objects whose code hands such requests over.
__attribute__((visibility("default"))) inline struct etm_cpu_group_calls etm_cpu_group_batch = {nullptr};
}

inline void etm_cpu_threadgroup_barrier() { etm_cpu_lanes.threadgroup_barrier(); }

inline void etm_cpu_simd_exchange(const void* site, const void* value, uint32_t size,
                                  struct etm_cpu_simd_view* out) {
  etm_cpu_lanes.simd_exchange(site, value, size, out);
}
