#include "device/cpu/fiber_context.h"

#include <cstdint>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
#define ETM_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ETM_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ETM_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ETM_ADDRESS_SANITIZER 1
#endif
#endif
#if defined(ETM_THREAD_SANITIZER)
#include <sanitizer/tsan_interface.h>
#endif
#if defined(ETM_ADDRESS_SANITIZER)
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__APPLE__)
#define ETM_FIBER_SYMBOL(name) "_" #name
#define ETM_FIBER_DECLARE(name) ".private_extern " ETM_FIBER_SYMBOL(name) "\n"
#define ETM_FIBER_END(name) ""
#else
#define ETM_FIBER_SYMBOL(name) #name
#define ETM_FIBER_DECLARE(name) \
  ".hidden " #name "\n"         \
  ".type " #name ", @function\n"
#define ETM_FIBER_END(name) ".size " #name ", .-" #name "\n"
#endif

// etm_fiber_start: the first code a new fiber runs; calls entry(argument), which the
// prepared frame placed in callee-saved registers.
#if defined(__x86_64__)
asm(".text\n"
    ".p2align 4\n"
    ".globl " ETM_FIBER_SYMBOL(etm_fiber_switch) "\n"
    ETM_FIBER_DECLARE(etm_fiber_switch)
    ETM_FIBER_SYMBOL(etm_fiber_switch) ":\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ETM_FIBER_END(etm_fiber_switch)
    ".p2align 4\n"
    ".globl " ETM_FIBER_SYMBOL(etm_fiber_start) "\n"
    ETM_FIBER_DECLARE(etm_fiber_start)
    ETM_FIBER_SYMBOL(etm_fiber_start) ":\n"
    "  movq %r12, %rdi\n"
    "  callq *%rbx\n"
    "  ud2\n"
    ETM_FIBER_END(etm_fiber_start));
#elif defined(__aarch64__)
asm(".text\n"
    ".p2align 4\n"
    ".globl " ETM_FIBER_SYMBOL(etm_fiber_switch) "\n"
    ETM_FIBER_DECLARE(etm_fiber_switch)
    ETM_FIBER_SYMBOL(etm_fiber_switch) ":\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    ETM_FIBER_END(etm_fiber_switch)
    ".p2align 4\n"
    ".globl " ETM_FIBER_SYMBOL(etm_fiber_start) "\n"
    ETM_FIBER_DECLARE(etm_fiber_start)
    ETM_FIBER_SYMBOL(etm_fiber_start) ":\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n"
    ETM_FIBER_END(etm_fiber_start));
#else
#error "the CPU device's fibers support x86-64 and aarch64 only"
#endif

extern "C" void etm_fiber_start(void);

namespace etm::device::cpu {

void* prepare_fiber_stack(void* stack_top, void (*entry)(void*), void* argument) {
  const uintptr_t top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15};
#if defined(__x86_64__)
  // Popped in order r15 r14 r13 r12 rbx rbp, then `ret` to etm_fiber_start with the stack
  // pointer at `top` (16-byte aligned for its call).
  auto* frame = reinterpret_cast<uint64_t*>(top - 56);
  std::memset(frame, 0, 56);
  frame[3] = reinterpret_cast<uint64_t>(argument);  // r12
  frame[4] = reinterpret_cast<uint64_t>(entry);     // rbx
  frame[6] = reinterpret_cast<uint64_t>(&etm_fiber_start);
  return frame;
#else
  // x19..x30 then d8..d15; x30 (the return address) at offset 88.
  auto* frame = reinterpret_cast<uint64_t*>(top - 160);
  std::memset(frame, 0, 160);
  frame[0] = reinterpret_cast<uint64_t>(argument);  // x19
  frame[1] = reinterpret_cast<uint64_t>(entry);     // x20
  frame[11] = reinterpret_cast<uint64_t>(&etm_fiber_start);
  return frame;
#endif
}

void sanitizer_context_create(SanitizerContext* context, const void* bottom, size_t size) {
  context->stack_bottom = bottom;
  context->stack_size = size;
#if defined(ETM_THREAD_SANITIZER)
  context->tsan_fiber = __tsan_create_fiber(0);
#endif
}

void sanitizer_context_destroy(SanitizerContext* context) {
#if defined(ETM_THREAD_SANITIZER)
  if (context->tsan_fiber) __tsan_destroy_fiber(context->tsan_fiber);
#endif
  *context = SanitizerContext{};
}

void sanitizer_context_of_thread(SanitizerContext* context) {
#if defined(ETM_THREAD_SANITIZER)
  context->tsan_fiber = __tsan_get_current_fiber();
#endif
#if defined(ETM_ADDRESS_SANITIZER)
#if defined(__APPLE__)
  const size_t size = pthread_get_stacksize_np(pthread_self());
  context->stack_bottom = static_cast<char*>(pthread_get_stackaddr_np(pthread_self())) - size;
  context->stack_size = size;
#else
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    void* bottom = nullptr;
    size_t size = 0;
    pthread_attr_getstack(&attributes, &bottom, &size);
    context->stack_bottom = bottom;
    context->stack_size = size;
    pthread_attr_destroy(&attributes);
  }
#endif
#endif
  (void)context;
}

void sanitizer_before_switch(SanitizerContext* from, const SanitizerContext& to) {
#if defined(ETM_ADDRESS_SANITIZER)
  __sanitizer_start_switch_fiber(from ? &from->asan_fake_stack : nullptr, to.stack_bottom, to.stack_size);
#endif
#if defined(ETM_THREAD_SANITIZER)
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  (void)from;
  (void)to;
}

void sanitizer_after_switch(SanitizerContext& current) {
#if defined(ETM_ADDRESS_SANITIZER)
  __sanitizer_finish_switch_fiber(current.asan_fake_stack, nullptr, nullptr);
#endif
  (void)current;
}

void sanitizer_resume_thread_after_fault(SanitizerContext& thread) {
  // The abandoned fiber never resumes: its fake stack goes (null `from`).
  sanitizer_before_switch(nullptr, thread);
  sanitizer_after_switch(thread);
}

}  // namespace etm::device::cpu
