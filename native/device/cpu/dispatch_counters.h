// Device-memory traffic counters of the CPU device (ETMETAL_COUNTERS=1): kernels are built
// instrumented (kernel_support/etm_cpu_counters.h), each dispatch gets a table of its
// bindings to count into, and the totals are recorded while a counting window is open.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cpu/cpu_pipeline.h"
#include "device/cpu/kernel_support/etm_cpu_kernel_abi.h"
#include "device/device.h"

namespace etm::device::cpu {

// ETMETAL_COUNTERS=1 in the environment when the process first asks; fixed afterwards (it
// selects how every kernel is compiled).
bool counters_enabled();

// The compiler flags that instrument a kernel's accesses (for counters and for checks).
std::vector<std::string> instrumentation_compiler_flags(bool clang);

// The bindings of one dispatch, for the kernel to count into.
class DispatchCountingTable {
 public:
  explicit DispatchCountingTable(const DispatchArgs& args);
  etm_cpu_counters* counters() { return &counters_; }
  // Adds the dispatch to the open window, if any.
  void record(const std::string& kernel, uint64_t threads, uint64_t threadgroups) const;

 private:
  std::vector<etm_cpu_binding> bindings_;
  etm_cpu_counters counters_{};
};

Status begin_counting();
Status end_counting(std::vector<DispatchCounters>* out);

}  // namespace etm::device::cpu
