#include "device/cpu/dispatch_counters.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace etm::device::cpu {
namespace {

struct CountingWindow {
  std::mutex mutex;
  bool open = false;
  std::vector<DispatchCounters> records;
};

CountingWindow& window() {
  static CountingWindow* instance = new CountingWindow();  // outlives static destructors
  return *instance;
}

}  // namespace

bool counters_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("ETMETAL_COUNTERS");
    return value && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

std::vector<std::string> instrumentation_compiler_flags(bool clang) {
  // A call per load and store, with its address and size, and nothing else: the hooks
  // (etm_cpu_counters.h) see every access. Each compiler's address sanitizer checks a memory
  // reference once per extended basic block, so the store of `x[i] += 1` would reach no hook
  // after its load did. clang's pass can be told to check each access
  // (-asan-opt-same-temp=0); g++'s cannot (asan.cc's instrument_derefs skips any reference its
  // table has seen, with no parameter), so g++ instruments with -fsanitize=thread, whose pass
  // calls a hook for every load and store and reports atomic operations as such.
  if (clang) {
    return {"-fsanitize=kernel-address", "-mllvm", "-asan-instrumentation-with-call-threshold=0",
            "-mllvm", "-asan-opt-same-temp=0", "-mllvm", "-asan-stack=0", "-mllvm", "-asan-globals=0"};
  }
  // Handed to the compiler proper with -Wp (which bypasses the driver): the driver would link
  // the kernel object with libtsan, whose runtime cannot be loaded into a running process and
  // is not wanted; the hooks are the kernel's own. -Wno-tsan: a thread fence is no concern of
  // the hooks.
  return {"-Wp,-fsanitize=thread,--param=tsan-instrument-func-entry-exit=0", "-Wno-tsan"};
}

DispatchCountingTable::DispatchCountingTable(const DispatchArgs& args) {
  for (size_t i = 0; i < args.buffers.size(); ++i) {
    if (!args.buffers[i] || i >= args.device_memory.size() || !args.device_memory[i]) continue;
    etm_cpu_binding binding{};
    binding.begin = reinterpret_cast<uintptr_t>(args.buffers[i]);
    binding.length = args.buffer_lengths[i];
    binding.index = static_cast<uint32_t>(i);
    bindings_.push_back(binding);
  }
  counters_.bindings = bindings_.data();
  counters_.binding_count = static_cast<uint32_t>(bindings_.size());
}

void DispatchCountingTable::record(const std::string& kernel, uint64_t threads, uint64_t threadgroups) const {
  CountingWindow& w = window();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (!w.open) return;
  DispatchCounters record;
  record.kernel = kernel;
  record.threads = threads;
  record.threadgroups = threadgroups;
  for (const etm_cpu_binding& binding : bindings_) {
    record.bytes_read += binding.bytes_read;
    record.bytes_written += binding.bytes_written;
  }
  w.records.push_back(std::move(record));
}

Status begin_counting() {
  if (!counters_enabled()) {
    return Status::error("traffic counters are off: set ETMETAL_COUNTERS=1 in the environment before the "
                         "process starts (kernels are compiled with the counting instrumentation)");
  }
  CountingWindow& w = window();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.open) return Status::error("a counting window is already open");
  w.open = true;
  w.records.clear();
  return Status();
}

Status end_counting(std::vector<DispatchCounters>* out) {
  CountingWindow& w = window();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (!w.open) return Status::error("no counting window is open");
  w.open = false;
  *out = std::move(w.records);
  w.records.clear();
  return Status();
}

}  // namespace etm::device::cpu
