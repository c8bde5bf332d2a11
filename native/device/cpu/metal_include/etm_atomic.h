// metal_atomic: metal::atomic<T> and the atomic_*_explicit functions.
//
// Threadgroups run on several host threads, so these are real atomics: GCC __atomic builtins
// on the plain storage (the same bytes Metal's atomic<T> occupies in a buffer). Every operation
// is sequentially consistent, whatever memory_order asks for (a stronger guarantee, and the one
// x86-64 gives read-modify-writes anyway). Float read-modify-writes and min/max are
// compare-and-swap loops.
#pragma once

#include "etm_sync.h"

namespace metal {

enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

enum thread_scope {
  thread_scope_thread = 0,
  thread_scope_simdgroup = 1,
  thread_scope_threadgroup = 2,
  thread_scope_device = 3,
};

template <class T>
struct atomic {
  static_assert(std::is_same<T, int>::value || std::is_same<T, uint>::value || std::is_same<T, bool>::value ||
                    std::is_same<T, float>::value || std::is_same<T, long>::value ||
                    std::is_same<T, ulong>::value,
                "metal::atomic supports int, uint, bool, float, long and ulong");
  atomic() = default;
  atomic(const atomic&) = delete;
  atomic& operator=(const atomic&) = delete;

  T value;
};
static_assert(sizeof(atomic<int>) == 4 && sizeof(atomic<float>) == 4, "atomics occupy their value's bytes");

typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<long> atomic_long;
typedef atomic<ulong> atomic_ulong;

// Orders memory operations of this thread; the CPU has one coherent memory, so every scope
// gets a full fence.
inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

}  // namespace metal

namespace etm_msl {

template <class T> struct identity { using type = T; };
template <class T> using non_deduced_t = typename identity<T>::type;

// g++'s instrumentation (-fsanitize=thread) hands each atomic builtin to a hook of its own, which
// checks it as atomic and counts what it reads and writes (etm_cpu_counters.h). clang's
// (-fsanitize=kernel-address) sees the builtin as a plain access (a read-modify-write as a
// store only), so the two functions below mark it and add the read.
#if defined(__SANITIZE_THREAD__)
#define ETM_CPU_HOOKS_SEE_ATOMICS 1
#else
#define ETM_CPU_HOOKS_SEE_ATOMICS 0
#endif

// Every atomic operation reaches its object through here.
template <class T> inline T* storage(volatile metal::atomic<T>* object) {
#if ETM_CPU_VALIDATE && !ETM_CPU_HOOKS_SEE_ATOMICS
  etm_cpu_kernel::validation_state()->pending_atomic = reinterpret_cast<uintptr_t>(&object->value);
#endif
  return const_cast<T*>(&object->value);
}

// A read-modify-write counts one read and one write of its value.
template <class T> inline T* storage_read_and_written(volatile metal::atomic<T>* object) {
#if ETM_CPU_COUNTERS && !ETM_CPU_HOOKS_SEE_ATOMICS
  etm_cpu_kernel::count_load(reinterpret_cast<uintptr_t>(&object->value), sizeof(T));
#endif
  return storage(object);
}

// Read-modify-write through compare-and-swap, for operations the hardware lacks. Not
// instrumented: its traffic (one read and one write, however often it retries) is counted here.
template <class T, class Update>
__attribute__((ETM_CPU_NOT_INSTRUMENTED)) inline T update_atomically(volatile metal::atomic<T>* object, Update update) {
#if ETM_CPU_COUNTERS
  etm_cpu_kernel::count_load(reinterpret_cast<uintptr_t>(&object->value), sizeof(T));
  etm_cpu_kernel::count_store(reinterpret_cast<uintptr_t>(&object->value), sizeof(T));
#endif
#if ETM_CPU_VALIDATE
  etm_cpu_kernel::validate_access(reinterpret_cast<uintptr_t>(&object->value), sizeof(T), ETM_CPU_ACCESS_ATOMIC,
                                  reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
#endif
  T* target = const_cast<T*>(&object->value);
  T expected;
  __atomic_load(target, &expected, __ATOMIC_RELAXED);
  for (;;) {
    T desired = update(expected);
    if (__atomic_compare_exchange(target, &expected, &desired, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return expected;
  }
}

template <class T> constexpr bool is_atomic_integer_v = std::is_integral<T>::value && !std::is_same<T, bool>::value;

}  // namespace etm_msl

namespace metal {

template <class T>
inline void atomic_store_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> desired, memory_order) {
  __atomic_store(etm_msl::storage(object), &desired, __ATOMIC_SEQ_CST);
}

template <class T>
inline T atomic_load_explicit(volatile atomic<T>* object, memory_order) {
  T result;
  __atomic_load(etm_msl::storage(object), &result, __ATOMIC_SEQ_CST);
  return result;
}

template <class T>
inline T atomic_exchange_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> desired, memory_order) {
  T previous;
  __atomic_exchange(etm_msl::storage_read_and_written(object), &desired, &previous, __ATOMIC_SEQ_CST);
  return previous;
}

// On failure *expected receives the current value. Compares bit patterns, like the hardware.
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* object, T* expected,
                                                  etm_msl::non_deduced_t<T> desired, memory_order, memory_order) {
  return __atomic_compare_exchange(etm_msl::storage_read_and_written(object), expected, &desired, false, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST);
}
template <class T>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* object, T* expected,
                                                    etm_msl::non_deduced_t<T> desired, memory_order, memory_order) {
  return __atomic_compare_exchange(etm_msl::storage_read_and_written(object), expected, &desired, false, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST);
}

template <class T, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0>
inline T atomic_fetch_add_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  if constexpr (std::is_floating_point<T>::value) {
    return etm_msl::update_atomically(object, [operand](T current) { return T(current + operand); });
  } else {
    return __atomic_fetch_add(etm_msl::storage_read_and_written(object), operand, __ATOMIC_SEQ_CST);
  }
}
template <class T, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0>
inline T atomic_fetch_sub_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  if constexpr (std::is_floating_point<T>::value) {
    return etm_msl::update_atomically(object, [operand](T current) { return T(current - operand); });
  } else {
    return __atomic_fetch_sub(etm_msl::storage_read_and_written(object), operand, __ATOMIC_SEQ_CST);
  }
}
template <class T, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0>
inline T atomic_fetch_min_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  return etm_msl::update_atomically(object, [operand](T current) { return operand < current ? operand : current; });
}
template <class T, std::enable_if_t<!std::is_same<T, bool>::value, int> = 0>
inline T atomic_fetch_max_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  return etm_msl::update_atomically(object, [operand](T current) { return current < operand ? operand : current; });
}
template <class T, std::enable_if_t<etm_msl::is_atomic_integer_v<T>, int> = 0>
inline T atomic_fetch_and_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  return __atomic_fetch_and(etm_msl::storage_read_and_written(object), operand, __ATOMIC_SEQ_CST);
}
template <class T, std::enable_if_t<etm_msl::is_atomic_integer_v<T>, int> = 0>
inline T atomic_fetch_or_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  return __atomic_fetch_or(etm_msl::storage_read_and_written(object), operand, __ATOMIC_SEQ_CST);
}
template <class T, std::enable_if_t<etm_msl::is_atomic_integer_v<T>, int> = 0>
inline T atomic_fetch_xor_explicit(volatile atomic<T>* object, etm_msl::non_deduced_t<T> operand, memory_order) {
  return __atomic_fetch_xor(etm_msl::storage_read_and_written(object), operand, __ATOMIC_SEQ_CST);
}

}  // namespace metal
