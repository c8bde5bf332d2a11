// The access hooks of instrumented kernels: device-memory traffic counters (ETMETAL_COUNTERS=1)
// and access checks (ETMETAL_VALIDATE=1).
//
// The compiler instruments every memory access of the kernel translation unit with a call
// before it, with its address and size (dispatch_counters.cpp's flags): g++ with
// -fsanitize=thread's hooks (__tsan_readN, __tsan_writeN, __tsan_{read,write}_range and the
// __tsan_atomicN_* operations), clang with -fsanitize=kernel-address's outlined checks
// (__asan_{load,store}N_noabort). Those hooks are defined here: an access that falls inside a
// binding's byte range adds its size to that binding's counters; threadgroup memory, the stack
// and the launch data lie outside every binding and are not counted. Because the compiler sees
// the accesses after inlining and type lowering, the counts follow whatever the source does:
// vector loads (a float4 load is 16 bytes), pointer arithmetic, casts between pointer types,
// pointers handed to helper functions, c10 and metal_stdlib helpers, simdgroup_matrix loads,
// and both halves of a read-modify-write (`x[i] += 1` is a load and a store). An atomic
// read-modify-write counts its size once as a read and once as a write (g++'s hooks see the
// operation; with clang's, which see a store, etm_atomic.h adds the read).
//
// With access checks every hook settles what it can itself (an access inside a binding, or far
// from the bindings and threadgroup memory) and hands the rest to the dispatch's checker
// (dispatch_validation.h), which judges it against the bindings, the threadgroup variables and
// the other threads of the group.
#pragma once

#if ETM_CPU_VALIDATE
#include "etm_cpu_threadgroup_checks.h"
#endif

namespace etm_cpu_kernel {

#if ETM_CPU_VALIDATE
// A threadgroup access: the usual one is judged here, the rest by the checker. Out of line, one
// copy per access size and kind (`Size`; 0: any, `any_size`), so the hooks' path for device
// memory needs no saved registers.
template <uint64_t Size, uint32_t Kind>
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noinline)) void validate_threadgroup_access(const ValidationState& state,
                                                                                uint64_t offset, uint64_t any_size,
                                                                                uintptr_t site) {
  const uint64_t size = Size ? Size : any_size;
  if constexpr (Kind != ETM_CPU_ACCESS_ATOMIC) {
    if (etm_cpu_checks::check_threadgroup_inline<Size, Kind>(static_cast<etm_cpu_checks::WorkerChecks*>(state.worker),
                                                             state.group->arena, offset, size, state.thread))
      return;
  }
  state.table->check_threadgroup(state.worker, offset, size, Kind, site, state.thread);
}

template <uint32_t Kind>
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void validate_threadgroup_access_sized(
    const ValidationState& state, uint64_t offset, uint64_t size, uintptr_t site) {
  switch (size) {
    case 1: return validate_threadgroup_access<1, Kind>(state, offset, size, site);
    case 2: return validate_threadgroup_access<2, Kind>(state, offset, size, site);
    case 4: return validate_threadgroup_access<4, Kind>(state, offset, size, site);
    case 8: return validate_threadgroup_access<8, Kind>(state, offset, size, site);
    case 16: return validate_threadgroup_access<16, Kind>(state, offset, size, site);
    default: return validate_threadgroup_access<0, Kind>(state, offset, size, site);
  }
}

// An access outside threadgroup memory and every range: a report if it falls within reach of
// a range, unless it reads the launch data. The usual such access is the kernel's own stack
// (locals whose address is taken), far from every range.
__attribute__((ETM_CPU_NOT_INSTRUMENTED, noinline)) inline void validate_outside_ranges(
    const ValidationState& state, const etm_cpu_validation* table, uintptr_t address, uint64_t size, uint32_t kind,
    uintptr_t site) {
  bool near = false;
  for (uint32_t i = 0; i < table->range_count; ++i) {
    const etm_cpu_range& range = table->ranges[i];
    near |= address - (range.begin - range.reach) < range.length + 2 * range.reach;
  }
  if (!near || address - reinterpret_cast<uintptr_t>(state.launch) < sizeof(etm_cpu_launch) ||
      address - reinterpret_cast<uintptr_t>(state.group) < sizeof(etm_cpu_group)) {
    return;
  }
  table->check(table->state, address, size, kind, site, state.thread);
}

__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline uintptr_t current_stack_pointer() {
#if defined(__x86_64__)
  uintptr_t pointer;
  __asm__("mov %%rsp, %0" : "=r"(pointer));
  return pointer;
#else
  return reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
#endif
}

__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void validate_access(uintptr_t address, uint64_t size, uint32_t kind,
                                                                  uintptr_t site) {
  ValidationState* state_address = validation_state();
  if (!state_address) return;
  ValidationState& state = *state_address;
  const etm_cpu_validation* table = state.table;
  if (!table) return;
#if !defined(__SANITIZE_THREAD__)  // g++'s hooks know atomics (etm_atomic.h)
  if (state.pending_atomic && address == state.pending_atomic) {
    kind = ETM_CPU_ACCESS_ATOMIC;
    state.pending_atomic = 0;
  }
#endif
  // Most accesses are settled without a call into the checker (etm_cpu_kernel_abi.h):
  // threadgroup memory's usual ones, accesses inside a binding, those far from every binding
  // and threadgroup memory (the stack, the kernel's constants), and reads of the launch data
  // (every entry makes some). The usual cases first.
  const unsigned char* arena = state.group->arena;
  const uintptr_t offset_in_arena = address - reinterpret_cast<uintptr_t>(arena);
  if (offset_in_arena < table->threadgroup_span) {  // its own allocation, apart from every range
    switch (kind) {
      case ETM_CPU_ACCESS_LOAD: return validate_threadgroup_access_sized<ETM_CPU_ACCESS_LOAD>(state, offset_in_arena, size, site);
      case ETM_CPU_ACCESS_STORE: return validate_threadgroup_access_sized<ETM_CPU_ACCESS_STORE>(state, offset_in_arena, size, site);
      default: return validate_threadgroup_access_sized<ETM_CPU_ACCESS_ATOMIC>(state, offset_in_arena, size, site);
    }
  }
  // Inside a range: first the one this site's last access fell in, then each (the test alone
  // in the loop: the reach of each is the rare path's).
  const auto inside = [&](const etm_cpu_range& range) __attribute__((always_inline)) {
    const uint64_t offset = address - range.begin;
    return offset < range.length && size <= range.length - offset;
  };
  uint8_t* hint = &state.table->range_hints[(site * 0x9e3779b97f4a7c15ull) >> 58];
  static_assert(ETM_CPU_RANGE_HINTS == 64, "the hash above makes 6 bits");
  if (inside(table->ranges[__atomic_load_n(hint, __ATOMIC_RELAXED)])) return;
  // The kernel's own stack, between here and its entry point's frame (locals whose address is
  // taken, the barrier-region form's per-thread frames): never judged, and far from every range.
  const uintptr_t stack_pointer = current_stack_pointer();
  if (address - stack_pointer < state.stack_top - stack_pointer) return;
  for (uint32_t i = 0; i < table->range_count; ++i) {
    if (inside(table->ranges[i])) {
      if (i <= UINT8_MAX) __atomic_store_n(hint, static_cast<uint8_t>(i), __ATOMIC_RELAXED);
      return;
    }
  }
  validate_outside_ranges(state, table, address, size, kind, site);
}
#endif

#if ETM_CPU_COUNTERS
// The binding that holds [address, address + size), or null.
__attribute__((ETM_CPU_NOT_INSTRUMENTED)) inline etm_cpu_binding* binding_at(uintptr_t address, uint64_t size) {
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

__attribute__((ETM_CPU_NOT_INSTRUMENTED)) inline void count_load(uintptr_t address, uint64_t size) {
  if (etm_cpu_binding* binding = binding_at(address, size)) {
    __atomic_fetch_add(&binding->bytes_read, size, __ATOMIC_RELAXED);
  }
}

__attribute__((ETM_CPU_NOT_INSTRUMENTED)) inline void count_store(uintptr_t address, uint64_t size) {
  if (etm_cpu_binding* binding = binding_at(address, size)) {
    __atomic_fetch_add(&binding->bytes_written, size, __ATOMIC_RELAXED);
  }
}
#endif

// `site`: the instrumented code's address (the hook's return address).
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void on_load(uintptr_t address, uint64_t size, uintptr_t site) {
#if ETM_CPU_VALIDATE
  validate_access(address, size, ETM_CPU_ACCESS_LOAD, site);
#else
  (void)site;
#endif
#if ETM_CPU_COUNTERS
  count_load(address, size);
#endif
}

__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void on_store(uintptr_t address, uint64_t size, uintptr_t site) {
#if ETM_CPU_VALIDATE
  validate_access(address, size, ETM_CPU_ACCESS_STORE, site);
#else
  (void)site;
#endif
#if ETM_CPU_COUNTERS
  count_store(address, size);
#endif
}

// An atomic operation the instrumentation reported as one (g++'s hooks): never a race; a
// read-modify-write counts as a read and a write.
__attribute__((ETM_CPU_NOT_INSTRUMENTED, always_inline)) inline void on_atomic(uintptr_t address, uint64_t size,
                                                                             bool reads, bool writes,
                                                                             uintptr_t site) {
#if ETM_CPU_VALIDATE
  validate_access(address, size, ETM_CPU_ACCESS_ATOMIC, site);
#else
  (void)site;
#endif
#if ETM_CPU_COUNTERS
  if (reads) count_load(address, size);
  if (writes) count_store(address, size);
#else
  (void)reads;
  (void)writes;
#endif
}

}  // namespace etm_cpu_kernel

// The hooks the instrumentation calls (the names and signatures are the compilers' ABI).
#define ETM_CPU_HOOK extern "C" __attribute__((ETM_CPU_NOT_INSTRUMENTED))
#define ETM_CPU_ACCESS_SITE reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define ETM_CPU_ADDRESS(pointer) reinterpret_cast<uintptr_t>(pointer)

// clang (-fsanitize=kernel-address).
#define ETM_CPU_ADDRESS_SANITIZER_HOOKS(size)                                       \
  ETM_CPU_HOOK void __asan_load##size##_noabort(uintptr_t a) {                      \
    etm_cpu_kernel::on_load(a, size, ETM_CPU_ACCESS_SITE);                          \
  }                                                                                 \
  ETM_CPU_HOOK void __asan_store##size##_noabort(uintptr_t a) {                     \
    etm_cpu_kernel::on_store(a, size, ETM_CPU_ACCESS_SITE);                         \
  }
ETM_CPU_ADDRESS_SANITIZER_HOOKS(1)
ETM_CPU_ADDRESS_SANITIZER_HOOKS(2)
ETM_CPU_ADDRESS_SANITIZER_HOOKS(4)
ETM_CPU_ADDRESS_SANITIZER_HOOKS(8)
ETM_CPU_ADDRESS_SANITIZER_HOOKS(16)
#undef ETM_CPU_ADDRESS_SANITIZER_HOOKS

ETM_CPU_HOOK void __asan_loadN_noabort(uintptr_t a, uintptr_t size) {
  etm_cpu_kernel::on_load(a, size, ETM_CPU_ACCESS_SITE);
}
ETM_CPU_HOOK void __asan_storeN_noabort(uintptr_t a, uintptr_t size) {
  etm_cpu_kernel::on_store(a, size, ETM_CPU_ACCESS_SITE);
}
// Bracket dynamic initialisers and calls that do not return; nothing to do for counting or checks.
ETM_CPU_HOOK void __asan_before_dynamic_init(const char*) {}
ETM_CPU_HOOK void __asan_after_dynamic_init(void) {}
ETM_CPU_HOOK void __asan_handle_no_return(void) {}

// g++ (-fsanitize=thread), with the parameter types of g++'s own declarations of these
// functions. Accesses of other sizes, and unaligned ones, come as ranges.
#define ETM_CPU_THREAD_SANITIZER_HOOKS(size)                                        \
  ETM_CPU_HOOK void __tsan_read##size(void* a) {                                    \
    etm_cpu_kernel::on_load(ETM_CPU_ADDRESS(a), size, ETM_CPU_ACCESS_SITE);         \
  }                                                                                 \
  ETM_CPU_HOOK void __tsan_write##size(void* a) {                                   \
    etm_cpu_kernel::on_store(ETM_CPU_ADDRESS(a), size, ETM_CPU_ACCESS_SITE);        \
  }
ETM_CPU_THREAD_SANITIZER_HOOKS(1)
ETM_CPU_THREAD_SANITIZER_HOOKS(2)
ETM_CPU_THREAD_SANITIZER_HOOKS(4)
ETM_CPU_THREAD_SANITIZER_HOOKS(8)
ETM_CPU_THREAD_SANITIZER_HOOKS(16)
#undef ETM_CPU_THREAD_SANITIZER_HOOKS

ETM_CPU_HOOK void __tsan_read_range(void* a, long size) {
  etm_cpu_kernel::on_load(ETM_CPU_ADDRESS(a), static_cast<uint64_t>(size), ETM_CPU_ACCESS_SITE);
}
ETM_CPU_HOOK void __tsan_write_range(void* a, long size) {
  etm_cpu_kernel::on_store(ETM_CPU_ADDRESS(a), static_cast<uint64_t>(size), ETM_CPU_ACCESS_SITE);
}
// A store and a load of an object's virtual-table pointer (`slot` holds it).
ETM_CPU_HOOK void __tsan_vptr_update(void* slot, void*) {
  etm_cpu_kernel::on_store(ETM_CPU_ADDRESS(slot), sizeof(void*), ETM_CPU_ACCESS_SITE);
}
ETM_CPU_HOOK void __tsan_vptr_read(void* slot) {
  etm_cpu_kernel::on_load(ETM_CPU_ADDRESS(slot), sizeof(void*), ETM_CPU_ACCESS_SITE);
}
// The object's constructor calls it; nothing to set up.
ETM_CPU_HOOK void __tsan_init(void) {}

// The atomic operations: each hook performs its operation (sequentially consistent, at least
// as strong as any order asked for; the `int`s are the orders the ABI passes).
#define ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, operation, builtin)                          \
  ETM_CPU_HOOK T __tsan_atomic##bits##_##operation(volatile void* a, T value, int) {              \
    etm_cpu_kernel::on_atomic(ETM_CPU_ADDRESS(a), sizeof(T), true, true, ETM_CPU_ACCESS_SITE);     \
    return builtin(static_cast<volatile T*>(a), value, __ATOMIC_SEQ_CST);                         \
  }
#define ETM_CPU_ATOMIC_COMPARE_EXCHANGE_HOOK(bits, T, strength, weak)                                 \
  ETM_CPU_HOOK bool __tsan_atomic##bits##_compare_exchange_##strength(volatile void* a, void* expected, T desired, \
                                                                     int, int) {                      \
    etm_cpu_kernel::on_atomic(ETM_CPU_ADDRESS(a), sizeof(T), true, true, ETM_CPU_ACCESS_SITE);         \
    return __atomic_compare_exchange_n(static_cast<volatile T*>(a), static_cast<T*>(expected), desired, weak, \
                                       __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                           \
  }
#define ETM_CPU_ATOMIC_HOOKS(bits, T)                                                                  \
  ETM_CPU_HOOK T __tsan_atomic##bits##_load(const volatile void* a, int) {                            \
    etm_cpu_kernel::on_atomic(ETM_CPU_ADDRESS(a), sizeof(T), true, false, ETM_CPU_ACCESS_SITE);        \
    return __atomic_load_n(static_cast<const volatile T*>(a), __ATOMIC_SEQ_CST);                      \
  }                                                                                                   \
  ETM_CPU_HOOK void __tsan_atomic##bits##_store(volatile void* a, T value, int) {                     \
    etm_cpu_kernel::on_atomic(ETM_CPU_ADDRESS(a), sizeof(T), false, true, ETM_CPU_ACCESS_SITE);        \
    __atomic_store_n(static_cast<volatile T*>(a), value, __ATOMIC_SEQ_CST);                           \
  }                                                                                                   \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, exchange, __atomic_exchange_n)                       \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_add, __atomic_fetch_add)                       \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_sub, __atomic_fetch_sub)                       \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_and, __atomic_fetch_and)                       \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_or, __atomic_fetch_or)                         \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_xor, __atomic_fetch_xor)                       \
  ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK(bits, T, fetch_nand, __atomic_fetch_nand)                     \
  ETM_CPU_ATOMIC_COMPARE_EXCHANGE_HOOK(bits, T, strong, false)                                         \
  ETM_CPU_ATOMIC_COMPARE_EXCHANGE_HOOK(bits, T, weak, true)                                            \
  ETM_CPU_HOOK T __tsan_atomic##bits##_compare_exchange_val(volatile void* a, T expected, T desired, int, int) { \
    etm_cpu_kernel::on_atomic(ETM_CPU_ADDRESS(a), sizeof(T), true, true, ETM_CPU_ACCESS_SITE);         \
    __atomic_compare_exchange_n(static_cast<volatile T*>(a), &expected, desired, false, __ATOMIC_SEQ_CST, \
                                __ATOMIC_SEQ_CST);                                                    \
    return expected;                                                                                  \
  }
// No 16-byte atomics: kernels using them need libatomic, which kernel objects do not link.
ETM_CPU_ATOMIC_HOOKS(8, unsigned char)
ETM_CPU_ATOMIC_HOOKS(16, unsigned short)
ETM_CPU_ATOMIC_HOOKS(32, unsigned int)
ETM_CPU_ATOMIC_HOOKS(64, unsigned long)
#undef ETM_CPU_ATOMIC_HOOKS
#undef ETM_CPU_ATOMIC_COMPARE_EXCHANGE_HOOK
#undef ETM_CPU_ATOMIC_READ_MODIFY_WRITE_HOOK
ETM_CPU_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
ETM_CPU_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#undef ETM_CPU_ADDRESS
#undef ETM_CPU_ACCESS_SITE
#undef ETM_CPU_HOOK
