// The kernel sanitizer of the CPU device (ETMETAL_VALIDATE=1). Kernels are built with the
// compiler's access instrumentation (kernel_support/etm_cpu_counters.h) and run on their usual
// path: plain loops and barrier regions tell the checker which thread their code runs for and
// which barriers and SIMD-group collectives the group passes; on fibers the executor knows.
// Every load and store is judged here before it happens:
// - device and constant memory: an access outside every binding but within reach of one
//   (the bound buffer's own pages, or the padding around a set_bytes copy) is out of bounds
//   of that binding;
// - threadgroup memory: an access outside the static variables and dynamic blocks (each
//   followed by unused bytes) is out of range; a read of bytes no thread of the group wrote
//   is uninitialised; a read or write of bytes another thread wrote, or a write of bytes
//   another thread read, since the last threadgroup_barrier is a race (atomics excepted).
//   The compiler checks a load and a following store of one location once, as the load: such
//   stores are found from the bytes they change (at the next access, barrier or group end),
//   so one that writes the value already there goes unseen;
// - a threadgroup_barrier that some threads of the group never reach (they returned).
// Reports name the kernel, the thread and threadgroup position, the binding or offset and
// the MSL line (kernels are built with line tables; addr2line reads them when a report is
// made); they become the dispatch's error once it has run. Nothing is stopped early: a checked
// access still happens (an access outside every mapping then faults, kernel_faults.h).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "device/cpu/cpu_pipeline.h"
#include "device/cpu/kernel_support/etm_cpu_kernel_abi.h"
#include "device/device.h"

namespace etm::device::cpu {

// ETMETAL_VALIDATE=1 when the process first asks; fixed afterwards (it selects how every
// kernel is compiled).
bool validation_enabled();

// Unused bytes after each threadgroup variable and dynamic block while validating (the
// kernel support header reserves the same after static variables).
inline constexpr uint64_t kThreadgroupRedzoneBytes = 16;
// What the redzones may add to a kernel's threadgroup memory beyond Metal's limit.
inline constexpr uint64_t kValidationArenaSlack = 8 * 1024;

struct WorkerShadow;

class DispatchValidation {
 public:
  // `static_ranges`: the static threadgroup variables' [begin, end) offsets, or null when the
  // object recorded too many (then only the total is checked). `threadgroup_blocks`: the
  // dynamic blocks, likewise. `threadgroup_bytes`: the whole layout, redzones included.
  DispatchValidation(const std::string& kernel, const DispatchArgs& args,
                     const std::vector<std::pair<uint64_t, uint64_t>>* static_ranges,
                     const std::vector<std::pair<uint64_t, uint64_t>>& threadgroup_blocks,
                     uint64_t threadgroup_bytes);

  etm_cpu_validation* table() { return &table_; }
  // Launch data the kernel's entry reads (the dynamic threadgroup offsets): no kernel memory,
  // so its reads pass unchecked, like those of the argument table.
  void allow_reads(const void* data, uint64_t length);
  // The argument table the kernel gets: set_bytes data is replaced by padded copies.
  void* const* buffers() const { return buffers_.data(); }

  // Executor hooks, on the worker that runs the group.
  void begin_group(const etm_cpu_group& group);
  // `released` threads pass a barrier; `finished` others returned before it.
  void barrier_released(const etm_cpu_group& group, uint32_t released, uint32_t finished);
  void end_group();

  // The dispatch's outcome: `executed` unless something was reported.
  Status outcome(const Status& executed) const;

 private:
  struct Binding {
    uintptr_t begin;
    uint64_t length;
    uint64_t reach;  // bytes on either side that belong to no other allocation
    uint32_t index;
    bool device;
  };

  struct Report {
    std::string text;
    uintptr_t site;  // the kernel code that made the access (0: none)
  };

  // The kernel's calls (etm_cpu_validation).
  static void check(void* state, uintptr_t address, uint64_t size, uint32_t kind, uintptr_t site, uint32_t running);
  static void* worker(void* state);
  static void check_threadgroup_access(void* worker, uint64_t offset, uint64_t size, uint32_t kind, uintptr_t site,
                                       uint32_t running);
  static void pass_barrier(void* state, uint32_t live);
  static void pass_simd_sync(void* worker, uint32_t first, uint64_t lanes);
  // The calling worker's group state is looked up once per call from the kernel and handed on.
  static void locate_thread(const WorkerShadow& shadow, uint32_t running, uint32_t* index, uint32_t* barriers,
                            uint32_t* syncs);
  void check_threadgroup(WorkerShadow& shadow, uint64_t offset, uint64_t size, uint32_t kind, uintptr_t site,
                         uint32_t running);
  void check_device(WorkerShadow& shadow, uintptr_t address, uint64_t size, uint32_t kind, uintptr_t site,
                    uint32_t running);
  void released_in(WorkerShadow& shadow, uint32_t released, uint32_t finished);
  // Settles the last checked store: its race with another thread's write is reported if the
  // store changed a byte.
  void settle_pending_store(WorkerShadow& shadow);
  void infer_writes(WorkerShadow& shadow, uint64_t begin, uint64_t end);
  void report_race(const etm_cpu_group& group, uint64_t offset, uint64_t size, uint32_t kind, uint32_t thread,
                   uint32_t other, const char* other_did, bool inferred, uintptr_t site);
  // `problem` follows the access's description ("reads 4 bytes at threadgroup memory offset 8").
  void report_threadgroup(const WorkerShadow& shadow, uint64_t offset, uint64_t size, uint32_t kind, uint32_t thread,
                          uintptr_t site, const char* problem);
  void report(const std::string& what, const etm_cpu_group* group, uint32_t thread, uintptr_t site);
  std::string thread_text(const etm_cpu_group& group, uint32_t thread) const;

  std::string kernel_;
  std::vector<Binding> bindings_;
  std::vector<etm_cpu_range> ranges_;  // what the kernel lets pass: bindings, launch data
  std::vector<void*> buffers_;
  std::vector<unsigned char> constant_copies_;
  // Per byte of the layout: the end of the variable or block that holds it (0: none does).
  std::vector<uint32_t> valid_end_;
  uint64_t threadgroup_bytes_;
  etm_cpu_validation table_{};

  mutable std::mutex mutex_;
  std::vector<Report> reports_;
  uint64_t report_count_ = 0;
};

}  // namespace etm::device::cpu
