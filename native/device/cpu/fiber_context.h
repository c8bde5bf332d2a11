// User-space context switch for the CPU device's fibers (one fiber per GPU thread of a
// threadgroup that uses barriers or SIMD-group functions). Saves only the callee-saved
// general and vector registers of the platform ABI; kernels never change the floating-point
// control state, so MXCSR / FPCR are not saved (measured: 1.8x faster switches).
#pragma once

#include <cstddef>

namespace etm::device::cpu {

extern "C" {
// Saves the current context's stack pointer into *save_sp and resumes the context whose
// stack pointer is resume_sp.
void etm_fiber_switch(void** save_sp, void* resume_sp);
}

// Prepares a fresh stack so that the first switch to the returned stack pointer calls
// entry(argument). `stack_top` is the highest address of the stack; entry must never return.
void* prepare_fiber_stack(void* stack_top, void (*entry)(void*), void* argument);

// The sanitizers must be told of every switch between stacks, or they read a thread jumping
// between stacks as corruption: ThreadSanitizer keeps a fiber per context; AddressSanitizer
// checks stack accesses against the current stack's bounds and keeps a fake stack per context.
// Without -fsanitize=thread/address every call does nothing.
struct SanitizerContext {
  void* tsan_fiber = nullptr;
  void* asan_fake_stack = nullptr;  // saved while the context is switched away
  const void* stack_bottom = nullptr;
  size_t stack_size = 0;
};

// A fiber's context, for the stack [bottom, bottom + size).
void sanitizer_context_create(SanitizerContext* context, const void* bottom, size_t size);
void sanitizer_context_destroy(SanitizerContext* context);
// The calling thread's own stack, which fibers switch back to.
void sanitizer_context_of_thread(SanitizerContext* context);
// Before etm_fiber_switch: `from` is left (null when it never resumes), `to` runs next.
void sanitizer_before_switch(SanitizerContext* from, const SanitizerContext& to);
// First thing in the context that runs after a switch (a fiber's start or a return from
// etm_fiber_switch).
void sanitizer_after_switch(SanitizerContext& current);
// After a fault handler jumped from a fiber back to the thread's own stack.
void sanitizer_resume_thread_after_fault(SanitizerContext& thread);

}  // namespace etm::device::cpu
