// Integer division faults in kernel code. A GPU returns a value for x / 0, x % 0 and
// INT_MIN / -1; x86-64 raises SIGFPE, which would end the host process. Kernel objects
// register their code; a SIGFPE handler emulates a faulting `div`/`idiv` inside that code with
// AArch64's results (what an Apple silicon host computes): x / 0 = 0, x % 0 = x,
// INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0, and resumes the kernel. Faults elsewhere go to
// the handler that was installed before (or the default action). Other hosts never trap.
#pragma once

namespace etm::device::cpu {

// Records the executable segments of the shared object `handle` (from dlopen) as kernel
// code and installs the handler on first use. Thread-safe; never fails loudly: a host where
// this cannot work keeps the default behaviour.
void register_kernel_code(void* handle);

}  // namespace etm::device::cpu
