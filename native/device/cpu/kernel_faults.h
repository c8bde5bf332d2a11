// Integer division faults in kernel code. A GPU returns a value for x / 0, x % 0 and
// INT_MIN / -1; x86-64 raises SIGFPE, which would end the host process. Kernel objects
// register their code; a SIGFPE handler emulates a faulting `div`/`idiv` inside that code with
// AArch64's results (what an Apple silicon host computes): x / 0 = 0, x % 0 = x,
// INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0, and resumes the kernel. Faults elsewhere go to
// the handler that was installed before (or the default action). Other hosts never trap.
//
// Other faults in a kernel end its dispatch, not the host process: a thread runs a dispatch's
// kernel calls inside a KernelFaultScope, and a SIGSEGV/SIGBUS in kernel code (a stray
// pointer, a buffer's guard zone) or near the thread's stack pointer (stack overflow: fiber
// stacks and worker stacks end in a guard page, and kernels are compiled with stack-clash
// probes so that a large frame cannot jump over it) returns the thread to the scope's recovery
// point, and the dispatch fails with what happened. A dispatch that runs longer than
// ETMETAL_KERNEL_TIMEOUT_MS (default 300000; 0: no limit) is stopped: each of its threads is
// interrupted (a real-time signal) and, as soon as it executes kernel code, returned to its
// recovery point; the dispatch fails, the workers go back to the pool and stay usable. Kernel
// frames are abandoned without unwinding (MSL values have no destructors that matter). A thread
// that never returns to kernel code (a kernel blocked in a system call) is interrupted again
// every 20 ms. Linux on x86-64 only; elsewhere a fault keeps its default action.
//
// The timeout costs a dispatch a few stores: arming a scope publishes the dispatch's serial and
// timeout in the thread's entry of the scope table, with no lock, clock read or notification. A
// watchdog thread polls the table every quarter of the shortest timeout there (5 ms to 1 s),
// notes when it first saw each armed (entry, serial), and past the timeout asks the threads
// running that serial to stop; so a dispatch is stopped between its timeout and a poll later,
// never earlier. It never reads a dispatch (it may have ended): a thread's handler compares the
// request with its own dispatch's serial. It sleeps while nothing is dispatched; the first scope
// armed after that (or one with a shorter timeout than it polls for) wakes it.
#pragma once

#include <setjmp.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace etm::device::cpu {

// Records the executable segments of the shared object `handle` (from dlopen) as kernel
// code and installs the handler on first use. Thread-safe; never fails loudly: a host where
// this cannot work keeps the default behaviour.
void register_kernel_code(void* handle);

// $ETMETAL_KERNEL_TIMEOUT_MS: how long one dispatch may run (default 300000; 0: no limit).
uint64_t kernel_timeout_ms();

// What one dispatch's threads share about its faults: its timeout and a serial that no other
// dispatch of the process has (the watchdog names dispatches by it).
class DispatchFaults {
 public:
  explicit DispatchFaults(uint64_t timeout_ms);  // 0: no limit
  DispatchFaults(const DispatchFaults&) = delete;
  DispatchFaults& operator=(const DispatchFaults&) = delete;

 private:
  friend class KernelFaultScope;
  friend struct FaultHandlers;
  const uint64_t serial_;
  const uint64_t timeout_ms_;
  // Its threads are the ones whose armed scope names its serial (the handlers' table of
  // scopes): the watchdog finds them there, so arming a scope takes no lock.
};

// The calling thread's entry in the handlers' table of scopes, kept by the caller in a
// thread-local it already reaches, so that arming a scope takes no TLS lookup of its own. One
// per thread, trivially destructible (it must stay readable while the thread's thread-locals are
// destroyed: its fault state marks it dead then).
struct ThreadScopeSlot {
  size_t index = SIZE_MAX;  // SIZE_MAX: not claimed yet
};

// Arms fault recovery for the calling thread. Use as
//   KernelFaultScope scope(&faults, thread_slot);
//   if (sigsetjmp(scope.recovery(), 0) == 0) { ...kernel calls... }
//   else { scope.after_recovery(); fail(scope.message()); }
// (sigsetjmp need not save the signal mask, a system call per dispatch: after_recovery
// unblocks the one signal whose handler jumped back, the only change to the mask.)
class KernelFaultScope {
 public:
  KernelFaultScope(DispatchFaults* faults, ThreadScopeSlot& thread_slot);
  ~KernelFaultScope();
  KernelFaultScope(const KernelFaultScope&) = delete;
  KernelFaultScope& operator=(const KernelFaultScope&) = delete;

  sigjmp_buf& recovery() { return recovery_; }
  // The threadgroup being run, for the message.
  void set_group(const uint32_t position[3]) {
    for (int i = 0; i < 3; ++i) group_[i] = position[i];
  }
  // After a recovery: restores the signal mask the handler's signal changed.
  void after_recovery();
  // After a recovery: what happened, e.g. "stack overflow in threadgroup (0, 0, 0)".
  std::string message() const;

 private:
  friend struct FaultHandlers;
  enum class Fault { none, stack_overflow, memory_access, timeout };
  sigjmp_buf recovery_;
  DispatchFaults* faults_;
  size_t slot_ = SIZE_MAX;  // this thread's entry in the handlers' table (SIZE_MAX: none)
  uint32_t group_[3] = {0, 0, 0};
  volatile Fault fault_ = Fault::none;
  volatile uintptr_t address_ = 0;
  volatile int signal_ = 0;  // the signal that jumped to the recovery point
};

}  // namespace etm::device::cpu
