// Runs the threadgroups of one dispatch on a persistent pool of worker threads. Kernels that
// call neither threadgroup_barrier nor a SIMD-group function run as plain loops over the
// threads of each group; kernels the translator gave a barrier-region form run each group in
// one call of it (msl_barrier_regions.h); the others run one fiber per GPU thread, with
// Metal's barrier and SIMD-group rules (kernel_support/../metal_include/etm_lane.h).
#pragma once

#include <cstdint>
#include <string>

#include "device/cpu/kernel_support/etm_cpu_kernel_abi.h"
#include "device/cpu/metal_include/etm_lane.h"
#include "device/device.h"

namespace etm::device::cpu {

class DispatchValidation;

inline constexpr uint32_t kSimdWidth = 32;
inline constexpr uint64_t kThreadgroupMemoryLimit = 32 * 1024;
inline constexpr uint32_t kMaxThreadsPerThreadgroup = 1024;

struct KernelDispatch {
  const std::string* kernel_name = nullptr;
  etm_cpu_loop_entry loop_entry = nullptr;
  etm_cpu_thread_entry thread_entry = nullptr;
  // Set: groups run as barrier regions (a group the entry declines runs on fibers).
  etm_cpu_regions_entry regions_entry = nullptr;
  // Set with regions_entry when the region form hands serial chains to the executor
  // (etm_lane.h's group requests): a worker runs several groups side by side, except while
  // validating.
  bool batches_groups = false;
  bool use_fibers = false;
  etm_cpu_launch launch{};
  // Static plus dynamic threadgroup memory; at most kThreadgroupMemoryLimit (plus
  // kValidationArenaSlack while validating).
  uint64_t threadgroup_bytes = 0;
  // Set while validating (dispatch_validation.h): groups are reported to it as they start and end.
  DispatchValidation* validation = nullptr;
  // How long the dispatch may run (kernel_timeout_ms() when its pipeline was made; 0: no limit).
  uint64_t timeout_ms = 0;
};

// Runs every threadgroup of the dispatch and returns when all have finished. Never throws.
// On a worker of the pool (a task of run_on_idle_worker) it runs on that thread alone.
Status execute_dispatch(const KernelDispatch& dispatch);

// Whether execute_dispatch spreads a dispatch of this geometry over the pool's workers (else
// it runs on the calling thread alone). `per_group`: its groups run on fibers or as barrier
// regions.
bool spreads_over_workers(const Size3& grid, const Size3& threads_per_group, bool per_group);

// Threads that run dispatches: the pool's workers and the thread that calls execute_dispatch
// ($ETMETAL_CPU_THREADS, default one per core).
unsigned executor_threads();

// Work for a pool worker beside the caller's own (dispatch_overlap.h).
class WorkerTask {
 public:
  virtual void run() = 0;

 protected:
  ~WorkerTask() = default;
};

// Hands `task` to a worker that is idle now and returns at once; false (the task is not
// taken) when every worker is busy or has a task waiting. The worker calls task->run() and
// never touches the task after it returns. A task must not wait for the pool.
bool run_on_idle_worker(WorkerTask* task);

// Takes back a task that run_on_idle_worker handed over and no worker has started yet: true
// when it was still waiting (the caller now owns it and may run it itself), false once a worker
// runs it.
bool take_back_from_workers(WorkerTask* task);

// On a fiber of a running group: the thread's thread_index_in_threadgroup, the
// threadgroup_barriers and (when asked) the SIMD-group collectives it has passed. False elsewhere.
bool current_kernel_thread(uint32_t* index, uint32_t* barriers, uint32_t* simd_syncs = nullptr);

// The executor's lane calls, which a kernel object that needs them gets in its etm_cpu_lanes.
const etm_cpu_lane_calls& executor_lane_calls();

// The executor's group calls, for a kernel object's etm_cpu_group_batch.
const etm_cpu_group_calls& executor_group_calls();

}  // namespace etm::device::cpu
