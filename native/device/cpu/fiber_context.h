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

// ThreadSanitizer must be told of every switch (before etm_fiber_switch, name the fiber that
// will run), or it reads a thread jumping between stacks as corruption. Without
// -fsanitize=thread these do nothing and the handles are null.
void* sanitizer_fiber_create();
void sanitizer_fiber_destroy(void* fiber);
void* sanitizer_current_fiber();
void sanitizer_switch_to_fiber(void* fiber);

}  // namespace etm::device::cpu
