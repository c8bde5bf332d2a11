// Device-memory traffic counters for kernels built with ETMETAL_COUNTERS=1.
//
// The compiler instruments every memory access of the kernel translation unit
// (-fsanitize=kernel-address with outlined checks: a call to __asan_{load,store}N_noabort
// before each load and store, with its address and size). Those hooks are defined here: an
// access that falls inside a binding's byte range adds its size to that binding's counters;
// threadgroup memory, the stack and the launch data lie outside every binding and are not
// counted. Because the compiler sees the accesses after inlining and type lowering, the counts
// are exact whatever the source does: vector loads (a float4 load is 16 bytes), pointer
// arithmetic, casts between pointer types, pointers handed to helper functions, c10 and
// metal_stdlib helpers, simdgroup_matrix loads. An atomic read-modify-write counts its size
// once as a read and once as a write (etm_atomic.h adds the read the instrumentation does not
// see).
//
// The binding lookup (address -> binding with its base and length) is also what a bounds
// checker needs: an access that is in no binding, not in the group's threadgroup memory and
// not on the thread's stack is out of bounds.
#pragma once

namespace etm_cpu_kernel {

// The binding that holds [address, address + size), or null.
__attribute__((no_sanitize_address)) inline etm_cpu_binding* binding_at(uintptr_t address, uint64_t size) {
  etm_cpu_counters* counters = dispatch_counters;
  if (!counters) return nullptr;
  for (uint32_t i = 0; i < counters->binding_count; ++i) {
    etm_cpu_binding& binding = counters->bindings[i];
    if (address - binding.begin < binding.length && size <= binding.length - (address - binding.begin)) {
      return &binding;
    }
  }
  return nullptr;
}

__attribute__((no_sanitize_address)) inline void count_load(uintptr_t address, uint64_t size) {
  if (etm_cpu_binding* binding = binding_at(address, size)) {
    __atomic_fetch_add(&binding->bytes_read, size, __ATOMIC_RELAXED);
  }
}

__attribute__((no_sanitize_address)) inline void count_store(uintptr_t address, uint64_t size) {
  if (etm_cpu_binding* binding = binding_at(address, size)) {
    __atomic_fetch_add(&binding->bytes_written, size, __ATOMIC_RELAXED);
  }
}

}  // namespace etm_cpu_kernel

// The hooks the instrumentation calls (the names and signatures are the compilers' ABI).
#define ETM_CPU_COUNTING_HOOKS(size)                                                              \
  extern "C" __attribute__((no_sanitize_address)) void __asan_load##size##_noabort(uintptr_t a) { \
    etm_cpu_kernel::count_load(a, size);                                                          \
  }                                                                                               \
  extern "C" __attribute__((no_sanitize_address)) void __asan_store##size##_noabort(uintptr_t a) { \
    etm_cpu_kernel::count_store(a, size);                                                         \
  }
ETM_CPU_COUNTING_HOOKS(1)
ETM_CPU_COUNTING_HOOKS(2)
ETM_CPU_COUNTING_HOOKS(4)
ETM_CPU_COUNTING_HOOKS(8)
ETM_CPU_COUNTING_HOOKS(16)
#undef ETM_CPU_COUNTING_HOOKS

extern "C" __attribute__((no_sanitize_address)) void __asan_loadN_noabort(uintptr_t a, uintptr_t size) {
  etm_cpu_kernel::count_load(a, size);
}
extern "C" __attribute__((no_sanitize_address)) void __asan_storeN_noabort(uintptr_t a, uintptr_t size) {
  etm_cpu_kernel::count_store(a, size);
}
// Bracket dynamic initialisers and calls that do not return; nothing to do for counting.
extern "C" __attribute__((no_sanitize_address)) void __asan_before_dynamic_init(const char*) {}
extern "C" __attribute__((no_sanitize_address)) void __asan_after_dynamic_init(void) {}
extern "C" __attribute__((no_sanitize_address)) void __asan_handle_no_return(void) {}
