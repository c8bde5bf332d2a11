// What the CPU device's command buffers hand to a compiled kernel: the contract between
// the command recording (cpu_device.cpp) and the MSL compiler + executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace etm::device::cpu {

struct DispatchArgs {
  // Argument table index -> address (buffer contents + offset, or a copy of set_bytes data);
  // null where nothing is bound.
  std::vector<void*> buffers;
  // Bytes from the address to the end of what was bound there, per index.
  std::vector<size_t> buffer_lengths;
  // 1 where a buffer is bound (device memory), 0 for set_bytes data and empty slots.
  std::vector<uint8_t> device_memory;
  // [[threadgroup(i)]] dynamic memory lengths set with set_threadgroup_memory_length.
  std::vector<size_t> threadgroup_memory_lengths;
  Size3 threads_per_group;
  // Total threads along each axis. For dispatch_threadgroups this is groups * group size.
  Size3 grid;
};

class CpuPipeline : public Pipeline {
 public:
  // Runs the whole dispatch and returns when every thread has finished. Called from the
  // queue thread of the command buffer; must not throw.
  virtual Status execute(const DispatchArgs& args) = 0;
  // Whether a dispatch of this geometry may run beside other dispatches of its command buffer
  // (dispatch_overlap.h): it runs on one thread, reaches no memory but its bound buffers, and
  // no instrumentation (validation, counters) needs dispatches one at a time.
  virtual bool may_overlap(const Size3& grid, const Size3& threads_per_group) const {
    (void)grid;
    (void)threads_per_group;
    return false;
  }
};

// Compiles MSL source for the CPU device. Every pipeline the library creates is a CpuPipeline.
Status compile_msl_library(const std::string& source, std::shared_ptr<Library>* out);

}  // namespace etm::device::cpu
