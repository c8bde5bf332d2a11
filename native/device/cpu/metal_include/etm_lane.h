// The two calls a translated kernel makes into the CPU device's executor. Everything else
// in the emulated Metal standard library is plain code; only these need the scheduler.
// Plain C linkage so compiled kernel objects never depend on the runtime's C++ ABI, and so
// the executor can tell from a kernel object's undefined symbols whether it needs fibers.
#pragma once

#include <stdint.h>

extern "C" {

// threadgroup_barrier: returns once every thread of the calling threadgroup that has not
// returned has arrived here.
void etm_cpu_threadgroup_barrier(void);

struct etm_cpu_simd_view {
  const unsigned char* values;  // `width` slots of `size` bytes, lane i at i * size
  uint64_t active;              // bit i set: lane i took part
  uint32_t lane;                // the caller's lane (thread_index_in_simdgroup)
  uint32_t width;               // lanes in the simdgroup (32)
};

// A SIMD-group collective. The calling lane publishes `size` (<= 64) bytes of `value` and
// returns once every lane of its simdgroup that is still running has either arrived at the
// same `site` or is parked elsewhere (at a threadgroup barrier or a different site). The
// lanes that arrived at `site` are the active ones; slots of all other lanes read as zero
// bits. `out` stays valid until the caller's next call into the executor.
void etm_cpu_simd_exchange(const void* site, const void* value, uint32_t size,
                           struct etm_cpu_simd_view* out);
}
