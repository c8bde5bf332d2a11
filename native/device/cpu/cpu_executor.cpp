#include "device/cpu/cpu_executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/cpu/dispatch_validation.h"
#include "device/cpu/fiber_context.h"
#include "device/cpu/kernel_faults.h"
#include "device/settings.h"
#include "device/tls_model.h"
#include "device/cpu/metal_include/etm_lane.h"

namespace etm::device::cpu {
namespace {

constexpr size_t kFiberStackBytes = 128 * 1024;
// Up to this many groups of a batching region form (etm_lane.h's group requests) run at once
// on one worker: enough independent chains to keep a divider's pipeline full.
constexpr uint32_t kBatchGroups = 8;
// Each keeps its region function's frames on a stack of its own, as large as a worker's.
constexpr size_t kBatchStackBytes = size_t(8) << 20;

constexpr size_t kMaxExchangeBytes = 64;
constexpr uint32_t kExchangeBufferBytes = kSimdWidth * kMaxExchangeBytes;

// ------------------------------------------------------------------------- the job

class Job {
 public:
  Job(const KernelDispatch& dispatch, uint64_t group_count, uint64_t chunk, uint32_t batch_groups)
      : dispatch_(dispatch),
        group_count_(group_count),
        chunk_(chunk),
        batch_groups_(batch_groups),
        faults_(dispatch.timeout_ms) {}

  const KernelDispatch& dispatch() const { return dispatch_; }
  // How many groups a worker runs side by side (batching region forms).
  uint32_t batch_groups() const { return batch_groups_; }

  // Claims the next range of groups; false when none are left or the job failed.
  bool claim(uint64_t* first, uint64_t* last) {
    if (failed_.load(std::memory_order_relaxed)) return false;
    const uint64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= group_count_) return false;
    *first = begin;
    *last = std::min(group_count_, begin + chunk_);
    return true;
  }

  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (error_.empty()) error_ = "kernel '" + *dispatch_.kernel_name + "': " + message;
    failed_.store(true, std::memory_order_relaxed);
  }

  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  DispatchFaults* faults() { return &faults_; }
  std::string error() {
    std::lock_guard<std::mutex> lock(error_mutex_);
    return error_;
  }

  // Geometry of threadgroup `linear` (x fastest).
  void describe_group(uint64_t linear, unsigned char* arena, etm_cpu_group* group) const {
    const etm_cpu_launch& l = dispatch_.launch;
    group->position[0] = static_cast<uint32_t>(linear % l.groups[0]);
    group->position[1] = static_cast<uint32_t>((linear / l.groups[0]) % l.groups[1]);
    group->position[2] = static_cast<uint32_t>(linear / (uint64_t{l.groups[0]} * l.groups[1]));
    uint32_t count = 1;
    for (int axis = 0; axis < 3; ++axis) {
      const uint64_t origin = uint64_t{group->position[axis]} * l.threads_per_group[axis];
      group->origin[axis] = static_cast<uint32_t>(origin);
      group->size[axis] = static_cast<uint32_t>(
          std::min<uint64_t>(l.threads_per_group[axis], l.grid[axis] - origin));
      count *= group->size[axis];
    }
    group->thread_count = count;
    group->arena = arena;
  }

 private:
  const KernelDispatch& dispatch_;
  const uint64_t group_count_;
  const uint64_t chunk_;
  const uint32_t batch_groups_;
  // Alone in its cache line: every claim writes it, while each group reads failed_.
  alignas(64) std::atomic<uint64_t> next_{0};
  alignas(64) std::atomic<bool> failed_{false};
  DispatchFaults faults_;
  std::mutex error_mutex_;
  std::string error_;
};

// -------------------------------------------------------------------------- fibers

enum class FiberState : uint8_t { runnable, at_barrier, at_exchange, done };

class FiberScheduler;

struct Fiber {
  void* stack_pointer = nullptr;
  FiberState state = FiberState::done;
  uint32_t index = 0;
  uint32_t barriers = 0;  // threadgroup_barriers passed
  uint32_t simd_syncs = 0;  // SIMD-group collectives passed (simdgroup_barrier among them)
  FiberScheduler* scheduler = nullptr;
  // The pending SIMD exchange.
  const void* site = nullptr;
  const void* value = nullptr;
  uint32_t size = 0;
  etm_cpu_simd_view* view = nullptr;
};

// A guard-paged stack, kept for the worker's lifetime.
class FiberStack {
 public:
  FiberStack() = default;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  ~FiberStack() {
    if (base_) munmap(base_, length_);
    sanitizer_context_destroy(&sanitizer_);
  }
  bool allocate(size_t bytes = kFiberStackBytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    length_ = bytes + page;
    void* memory = mmap(nullptr, length_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) return false;
    base_ = memory;
    // Overflowing the stack hits this page instead of another fiber's stack.
    mprotect(base_, page, PROT_NONE);
    sanitizer_context_create(&sanitizer_, static_cast<unsigned char*>(base_) + page, bytes);
    return true;
  }
  void* top() const { return static_cast<unsigned char*>(base_) + length_; }
  SanitizerContext& sanitizer() { return sanitizer_; }

 private:
  void* base_ = nullptr;
  size_t length_ = 0;
  SanitizerContext sanitizer_;
};

// Runs one threadgroup at a time, one fiber per thread, on the worker that owns it.
// A fiber that blocks switches directly to the next runnable fiber of the group; when none
// is left, control returns to the scheduler, which resolves SIMD exchanges (per simdgroup
// and call site) or, when only barrier waiters remain, releases the barrier.
class FiberScheduler {
 public:
  // False (with the job failed) when stacks cannot be allocated.
  bool run_group(Job* job, const etm_cpu_group* group) {
    const uint32_t count = group->thread_count;
    if (!reserve(count)) {
      job->fail("cannot allocate fiber stacks for " + std::to_string(count) + " threads");
      return false;
    }
    job_ = job;
    group_ = group;
    count_ = count;
    done_ = 0;
    for (uint32_t i = 0; i < count; ++i) {
      Fiber& f = fibers_[i];
      f.state = FiberState::runnable;
      f.index = i;
      f.barriers = 0;
      f.simd_syncs = 0;
      f.scheduler = this;
      // Staggered stack tops keep the fibers' hot frames out of one cache set.
      auto* top = static_cast<unsigned char*>(stacks_[i]->top()) - (i * 832u) % 4096u;
      f.stack_pointer = prepare_fiber_stack(top, &FiberScheduler::fiber_main, &f);
    }
    sanitizer_context_of_thread(&scheduler_sanitizer_);
    bool reported_partial_barrier = false;
    for (;;) {
      Fiber* first = next_runnable(0);
      if (first) {
        current_ = first;
        sanitizer_before_switch(&scheduler_sanitizer_, stacks_[first->index]->sanitizer());
        etm_fiber_switch(&scheduler_stack_pointer_, first->stack_pointer);
        sanitizer_after_switch(scheduler_sanitizer_);
      }
      if (done_ == count_) break;
      if (resolve_exchanges()) continue;
      uint32_t released = 0;
      for (uint32_t i = 0; i < count_; ++i) {
        if (fibers_[i].state == FiberState::at_barrier) {
          fibers_[i].state = FiberState::runnable;
          ++released;
        }
      }
      if (released && job->dispatch().validation) {
        job->dispatch().validation->barrier_released(*group, released, reported_partial_barrier ? 0 : done_);
        reported_partial_barrier = reported_partial_barrier || done_;
      }
      if (!released) {
        job->fail("internal error: threadgroup has no runnable thread");
        return false;
      }
    }
    current_ = nullptr;
    return true;
  }

  Fiber* current() const { return current_; }

  // A fault handler jumped from the running fiber (if any) back to the worker's stack: that
  // fiber and the rest of its group are abandoned.
  void abandon_after_fault() {
    if (!current_) return;
    sanitizer_resume_thread_after_fault(scheduler_sanitizer_);
    current_ = nullptr;
  }

  // Called on the current fiber: gives up the CPU until the scheduler makes it runnable.
  void park(Fiber* fiber) {
    // A finished fiber never resumes: the sanitizers may drop its state.
    SanitizerContext* leaving = fiber->state == FiberState::done ? nullptr : &stacks_[fiber->index]->sanitizer();
    Fiber* next = next_runnable(fiber->index + 1);
    if (next) {
      current_ = next;
      sanitizer_before_switch(leaving, stacks_[next->index]->sanitizer());
      etm_fiber_switch(&fiber->stack_pointer, next->stack_pointer);
    } else {
      current_ = nullptr;
      sanitizer_before_switch(leaving, scheduler_sanitizer_);
      etm_fiber_switch(&fiber->stack_pointer, scheduler_stack_pointer_);
    }
    sanitizer_after_switch(stacks_[fiber->index]->sanitizer());
  }

 private:
  static void fiber_main(void* argument) {
    Fiber* fiber = static_cast<Fiber*>(argument);
    FiberScheduler* self = fiber->scheduler;
    SanitizerContext& sanitizer = self->stacks_[fiber->index]->sanitizer();
    sanitizer.asan_fake_stack = nullptr;  // a fresh start has none saved
    sanitizer_after_switch(sanitizer);
    self->job_->dispatch().thread_entry(&self->job_->dispatch().launch, self->group_, fiber->index);
    fiber->state = FiberState::done;
    ++self->done_;
    self->park(fiber);
    std::abort();  // a finished fiber is never resumed
  }

  bool reserve(uint32_t count) {
    if (fibers_.size() < count) fibers_.resize(count);
    while (stacks_.size() < count) {
      auto stack = std::make_unique<FiberStack>();
      if (!stack->allocate()) return false;
      stacks_.push_back(std::move(stack));
    }
    return true;
  }

  Fiber* next_runnable(uint32_t from) {
    for (uint32_t i = from; i < count_; ++i) {
      if (fibers_[i].state == FiberState::runnable) return &fibers_[i];
    }
    return nullptr;
  }

  unsigned char* exchange_buffer(size_t k) {
    while (exchange_buffers_.size() <= k) {
      exchange_buffers_.push_back(std::make_unique<unsigned char[]>(kExchangeBufferBytes));
    }
    return exchange_buffers_[k].get();
  }

  // Completes every pending exchange: in each simdgroup, the lanes parked at one call
  // site form one collective; all other lanes of the simdgroup read as inactive.
  bool resolve_exchanges() {
    bool resolved = false;
    size_t buffers_used = 0;
    for (uint32_t base = 0; base < count_; base += kSimdWidth) {
      const uint32_t lanes = std::min(kSimdWidth, count_ - base);
      uint64_t pending = 0;
      for (uint32_t l = 0; l < lanes; ++l) {
        if (fibers_[base + l].state == FiberState::at_exchange) pending |= uint64_t{1} << l;
      }
      while (pending) {
        const Fiber& lead = fibers_[base + __builtin_ctzll(pending)];
        uint64_t active = 0;
        for (uint64_t m = pending; m; m &= m - 1) {
          const Fiber& f = fibers_[base + __builtin_ctzll(m)];
          if (f.site == lead.site) active |= m & (~m + 1);
        }
        pending &= ~active;
        const uint32_t size = lead.size;
        unsigned char* values = exchange_buffer(buffers_used++);
        std::memset(values, 0, size_t{kSimdWidth} * size);
        for (uint64_t m = active; m; m &= m - 1) {
          const uint32_t lane = static_cast<uint32_t>(__builtin_ctzll(m));
          Fiber& f = fibers_[base + lane];
          if (f.size != size) {
            job_->fail("lanes of one simdgroup exchanged values of different sizes at one call site");
          }
          // Value-less collectives (simdgroup_barrier) park with no value at all.
          const uint32_t bytes = std::min(size, f.size);
          if (bytes != 0) std::memcpy(values + size_t{lane} * size, f.value, bytes);
        }
        for (uint64_t m = active; m; m &= m - 1) {
          const uint32_t lane = static_cast<uint32_t>(__builtin_ctzll(m));
          Fiber& f = fibers_[base + lane];
          f.view->values = values;
          f.view->active = active;
          f.view->lane = lane;
          f.view->width = kSimdWidth;
          f.state = FiberState::runnable;
        }
        resolved = true;
      }
    }
    return resolved;
  }

  std::vector<Fiber> fibers_;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  std::vector<std::unique_ptr<unsigned char[]>> exchange_buffers_;
  void* scheduler_stack_pointer_ = nullptr;
  SanitizerContext scheduler_sanitizer_;
  Fiber* current_ = nullptr;
  Job* job_ = nullptr;
  const etm_cpu_group* group_ = nullptr;
  uint32_t count_ = 0;
  uint32_t done_ = 0;
};

// ------------------------------------------------------- groups side by side

enum class BatchState : uint8_t { runnable, waiting, done };

class GroupBatch;

struct BatchedGroup {
  void* stack_pointer = nullptr;
  BatchState state = BatchState::done;
  int declined = 0;  // the region form's answer: 1 sends the group to fibers
  etm_cpu_group group{};
  etm_cpu_group_request* request = nullptr;  // while waiting
  GroupBatch* batch = nullptr;
};

// Runs the region forms of several groups side by side, each on its own stack and with its
// own arena: a group that hands a request over (await) parks; when every group is parked or
// done, the requests are computed together, by kind, and the parked groups resume.
class GroupBatch {
 public:
  GroupBatch() = default;
  GroupBatch(const GroupBatch&) = delete;
  GroupBatch& operator=(const GroupBatch&) = delete;
  ~GroupBatch() {
    for (unsigned char* arena : arenas_) std::free(arena);
  }

  // Runs the groups `linear[0 .. count)` (count <= kBatchGroups) up to their ends or until the
  // job fails; false (with the job failed) when stacks or arenas cannot be had. A group whose
  // region form declined it keeps `declined` set, with its geometry and arena, for the fibers.
  bool run(Job* job, const uint64_t* linear, uint32_t count, KernelFaultScope* scope) {
    if (!reserve()) {
      job->fail("cannot allocate stacks for threadgroups run side by side");
      return false;
    }
    job_ = job;
    count_ = count;
    for (uint32_t b = 0; b < count; ++b) {
      BatchedGroup& g = groups_[b];
      job->describe_group(linear[b], arenas_[b], &g.group);
      g.state = BatchState::runnable;
      g.declined = 0;
      g.request = nullptr;
      g.batch = this;
      // Staggered stack tops keep the groups' hot frames out of one cache set.
      auto* top = static_cast<unsigned char*>(stacks_[b]->top()) - (b * 832u) % 4096u;
      g.stack_pointer = prepare_fiber_stack(top, &GroupBatch::group_main, &g);
    }
    sanitizer_context_of_thread(&thread_sanitizer_);
    while (!job->failed()) {
      for (uint32_t b = 0; b < count && !job->failed(); ++b) {
        if (groups_[b].state != BatchState::runnable) continue;
        scope->set_group(groups_[b].group.position);
        current_ = b;
        sanitizer_before_switch(&thread_sanitizer_, stacks_[b]->sanitizer());
        etm_fiber_switch(&thread_stack_pointer_, groups_[b].stack_pointer);
        sanitizer_after_switch(thread_sanitizer_);
        current_ = kNone;
      }
      if (!compute_requests()) break;
    }
    return true;
  }

  const BatchedGroup& group(uint32_t b) const { return groups_[b]; }

  // Called on a batched group's stack: parks it until its request was computed.
  bool await(etm_cpu_group_request* request) {
    if (current_ == kNone) return false;
    BatchedGroup& g = groups_[current_];
    g.request = request;
    g.state = BatchState::waiting;
    sanitizer_before_switch(&stacks_[current_]->sanitizer(), thread_sanitizer_);
    const uint32_t b = current_;
    etm_fiber_switch(&g.stack_pointer, thread_stack_pointer_);
    sanitizer_after_switch(stacks_[b]->sanitizer());
    return true;
  }

  // A fault handler jumped from a batched group back to the worker's stack: the batch is
  // abandoned (the next run starts every stack afresh).
  void abandon_after_fault() {
    if (current_ == kNone) return;
    sanitizer_resume_thread_after_fault(thread_sanitizer_);
    current_ = kNone;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  static void group_main(void* argument) {
    BatchedGroup* g = static_cast<BatchedGroup*>(argument);
    GroupBatch* self = g->batch;
    const uint32_t b = static_cast<uint32_t>(g - self->groups_);
    SanitizerContext& sanitizer = self->stacks_[b]->sanitizer();
    sanitizer.asan_fake_stack = nullptr;  // a fresh start has none saved
    sanitizer_after_switch(sanitizer);
    const KernelDispatch& dispatch = self->job_->dispatch();
    g->declined = dispatch.regions_entry(&dispatch.launch, &g->group);
    g->state = BatchState::done;
    // A finished group never resumes: the sanitizers may drop its state.
    sanitizer_before_switch(nullptr, self->thread_sanitizer_);
    etm_fiber_switch(&g->stack_pointer, self->thread_stack_pointer_);
    std::abort();
  }

  bool reserve() {
    while (stacks_.size() < kBatchGroups) {
      auto stack = std::make_unique<FiberStack>();
      if (!stack->allocate(kBatchStackBytes)) return false;
      stacks_.push_back(std::move(stack));
    }
    while (arenas_.size() < kBatchGroups) {
      auto* arena = static_cast<unsigned char*>(std::aligned_alloc(64, kThreadgroupMemoryLimit));
      if (!arena) return false;
      arenas_.push_back(arena);
    }
    return true;
  }

  // Computes the parked groups' requests, those of one kind together, and makes their groups
  // runnable; false when none is parked (every group is done).
  bool compute_requests() {
    etm_cpu_group_request* pending[kBatchGroups];
    uint32_t parked = 0;
    for (uint32_t b = 0; b < count_; ++b) {
      if (groups_[b].state != BatchState::waiting) continue;
      pending[parked++] = groups_[b].request;
      groups_[b].state = BatchState::runnable;
    }
    for (uint32_t first = 0; first < parked;) {
      // Gather this kind's requests after `first`, in order; the rest move behind them.
      uint32_t same = first + 1;
      for (uint32_t i = same; i < parked; ++i) {
        if (pending[i]->compute == pending[first]->compute) std::swap(pending[same++], pending[i]);
      }
      pending[first]->compute(pending + first, same - first);
      first = same;
    }
    return parked != 0;
  }

  BatchedGroup groups_[kBatchGroups];
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  std::vector<unsigned char*> arenas_;
  Job* job_ = nullptr;
  uint32_t count_ = 0;
  uint32_t current_ = kNone;
  void* thread_stack_pointer_ = nullptr;
  SanitizerContext thread_sanitizer_;
};

// ------------------------------------------------------------------ worker state

// What the lane calls need to know about the thread they run on.
struct ExecutionContext {
  Job* job = nullptr;
  FiberScheduler* scheduler = nullptr;  // null on the loop and barrier-region paths
  GroupBatch* batch = nullptr;          // set while groups run side by side
};

struct WorkerState;

// What the executor keeps per thread, in one thread-local that needs no guard (trivially
// constructed and destroyed), so that run_job reaches all of it with one TLS lookup. (Not
// initial-exec TLS: libetmetal is dlopen'ed late, e.g. by Python after torch, when no static
// TLS is left to give it.)
struct WorkerLocals {
  ExecutionContext* context = nullptr;  // read on every barrier and SIMD exchange
  bool pool_worker = false;             // set on the pool's workers
  WorkerState* state = nullptr;         // once worker_state() has made it
  ThreadScopeSlot fault_slot;           // for run_job's KernelFaultScope
};
ETM_THREAD_LOCAL WorkerLocals tl_worker;

struct WorkerState {
  WorkerState()
      : arena(static_cast<unsigned char*>(std::aligned_alloc(64, kThreadgroupMemoryLimit + kValidationArenaSlack))) {}
  ~WorkerState() { std::free(arena); }
  unsigned char* arena;
  FiberScheduler scheduler;
  GroupBatch batch;
};

// The calling thread's state, made at its first job and destroyed when the thread exits.
[[gnu::noinline]] WorkerState& worker_state() {
  ETM_THREAD_LOCAL WorkerState state;
  tl_worker.state = &state;
  return state;
}

void run_groups(Job* job, WorkerState& state, ExecutionContext& context, ExecutionContext& fallback,
                KernelFaultScope* scope);

// A thread whose AVX registers hold data in their upper halves (Linux gives a new thread a copy
// of its creator's registers: the runtime's threads start after torch ran AVX-512 code; glibc's
// EVEX string functions never clear them) pays for it on every legacy-SSE instruction, and
// kernels built for the portable baseline ISA are all legacy SSE calling libm's VEX code:
// unet_like ran 4x slower. vzeroupper clears the upper halves; the low 128 bits, all that
// non-AVX code uses, stay.
void clear_upper_vector_state() {
#if defined(__x86_64__)
  static const bool has_avx = __builtin_cpu_supports("avx");
  if (has_avx) {
    asm volatile("vzeroupper" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                 "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  }
#endif
}

void run_job(Job* job) {
  clear_upper_vector_state();
  WorkerLocals& locals = *thread_local_address(tl_worker);
  WorkerState& state = locals.state ? *locals.state : worker_state();
  if (!state.arena) {
    job->fail("cannot allocate threadgroup memory");
    return;
  }
  const KernelDispatch& dispatch = job->dispatch();
  ExecutionContext context;
  context.job = job;
  context.scheduler = dispatch.use_fibers ? &state.scheduler : nullptr;
  ExecutionContext fallback = context;  // for groups the region form declines
  fallback.scheduler = &state.scheduler;
  ExecutionContext* saved = locals.context;
  locals.context = &context;
  {
    // A fault or the timeout in kernel code returns here (kernel_faults.h).
    KernelFaultScope scope(job->faults(), locals.fault_slot);
    if (sigsetjmp(scope.recovery(), 0) == 0) {
      run_groups(job, state, context, fallback, &scope);
    } else {
      scope.after_recovery();
      state.scheduler.abandon_after_fault();
      state.batch.abandon_after_fault();
      job->fail(scope.message());
    }
  }
  locals.context = saved;
}

// A group the region form declined, on fibers; false when the fibers could not run it.
bool run_declined_group(Job* job, WorkerState& state, ExecutionContext& context, ExecutionContext& fallback,
                        const etm_cpu_group* group) {
  tl_worker.context = &fallback;
  const bool ran = state.scheduler.run_group(job, group);
  tl_worker.context = &context;
  return ran;
}

// Groups of a batching region form, kBatchGroups at a time; those it declines then run on
// fibers.
void run_batched_groups(Job* job, WorkerState& state, ExecutionContext& context, ExecutionContext& fallback,
                        KernelFaultScope* scope) {
  uint64_t linear[kBatchGroups];
  uint32_t count = 0;
  const auto run_batch = [&] {
    context.batch = &state.batch;
    const bool ran = state.batch.run(job, linear, count, scope);
    context.batch = nullptr;
    for (uint32_t b = 0; ran && b < count && !job->failed(); ++b) {
      const BatchedGroup& g = state.batch.group(b);
      if (!g.declined) continue;
      scope->set_group(g.group.position);
      if (!run_declined_group(job, state, context, fallback, &g.group)) return false;
    }
    count = 0;
    return ran && !job->failed();
  };
  uint64_t first = 0, last = 0;
  while (job->claim(&first, &last)) {
    for (uint64_t g = first; g < last; ++g) {
      linear[count++] = g;
      if (count == job->batch_groups() && !run_batch()) return;
    }
  }
  if (count) run_batch();
}

void run_groups(Job* job, WorkerState& state, ExecutionContext& context, ExecutionContext& fallback,
                KernelFaultScope* scope) {
  const KernelDispatch& dispatch = job->dispatch();
  if (dispatch.batches_groups && !dispatch.validation) {
    run_batched_groups(job, state, context, fallback, scope);
    return;
  }
  etm_cpu_group group;
  uint64_t first = 0, last = 0;
  while (job->claim(&first, &last)) {
    for (uint64_t g = first; g < last && !job->failed(); ++g) {
      job->describe_group(g, state.arena, &group);
      scope->set_group(group.position);
      if (dispatch.validation) dispatch.validation->begin_group(group);
      if (dispatch.regions_entry) {
        if (dispatch.regions_entry(&dispatch.launch, &group) != 0 &&
            !run_declined_group(job, state, context, fallback, &group)) {
          break;
        }
      } else if (dispatch.use_fibers) {
        if (!state.scheduler.run_group(job, &group)) break;
      } else {
        dispatch.loop_entry(&dispatch.launch, &group);
      }
      if (dispatch.validation) dispatch.validation->end_group();
    }
  }
}

// ---------------------------------------------------------------------------- pool

class WorkerPool {
 public:
  WorkerPool() {
    unsigned total = std::thread::hardware_concurrency();
    int64_t requested = 0;  // the runtime reports an invalid value when it starts
    if (settings::read_integer("ETMETAL_CPU_THREADS", &requested).ok() && requested > 0)
      total = static_cast<unsigned>(requested);
    total = std::max(1u, total);
    for (unsigned i = 1; i < total; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  unsigned thread_count() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Runs the job on every worker and the calling thread, or on the calling thread alone.
  void run(Job* job, bool parallel) {
    // A worker running a task must not wait for the pool: it would wait for itself.
    if (!parallel || workers_.empty() || tl_worker.pool_worker) {
      // Only the calling thread's state is used: dispatches of other queues may run beside it.
      run_job(job);
      return;
    }
    std::lock_guard<std::mutex> one_parallel_dispatch_at_a_time(dispatch_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job;
      running_ = static_cast<unsigned>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    run_job(job);
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] { return running_ == 0; });
    job_ = nullptr;
  }

  bool run_on_idle_worker(WorkerTask* task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_ <= tasks_.size()) return false;
      tasks_.push_back(task);
    }
    wake_.notify_one();
    return true;
  }

  bool take_back(WorkerTask* task) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto waiting = std::find(tasks_.begin(), tasks_.end(), task);
    if (waiting == tasks_.end()) return false;
    tasks_.erase(waiting);
    return true;
  }

 private:
  // A parallel job goes first: it waits for every worker, a task for one.
  void worker_loop() {
    tl_worker.pool_worker = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [&] { return generation_ != seen || !tasks_.empty(); });
      --idle_;
      if (generation_ != seen) {
        seen = generation_;
        Job* job = job_;
        lock.unlock();
        run_job(job);
        lock.lock();
        if (--running_ == 0) finished_.notify_one();
        continue;
      }
      WorkerTask* task = tasks_.front();
      tasks_.pop_front();
      lock.unlock();
      task->run();
      lock.lock();
    }
  }

  std::mutex dispatch_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::vector<std::thread> workers_;
  Job* job_ = nullptr;
  unsigned running_ = 0;
  uint64_t generation_ = 0;
  size_t idle_ = 0;  // workers waiting for work
  std::deque<WorkerTask*> tasks_;
};

// Never destroyed: workers may still be parked when the process exits.
WorkerPool& pool() {
  static WorkerPool* instance = new WorkerPool();
  return *instance;
}

// Small dispatches are not worth waking the pool for.
bool worth_spreading(uint64_t group_count, uint64_t threads, bool per_group) {
  return group_count > 1 && threads >= (per_group ? 256u : 16384u);
}

}  // namespace

bool spreads_over_workers(const Size3& grid, const Size3& threads_per_group, bool per_group) {
  const auto groups = [](uint64_t threads, uint64_t per_group) { return (threads + per_group - 1) / per_group; };
  const uint64_t group_count = groups(grid.x, threads_per_group.x) * groups(grid.y, threads_per_group.y) *
                               groups(grid.z, threads_per_group.z);
  return worth_spreading(group_count, grid.volume(), per_group);
}

unsigned executor_threads() { return pool().thread_count(); }

bool run_on_idle_worker(WorkerTask* task) { return pool().run_on_idle_worker(task); }

bool take_back_from_workers(WorkerTask* task) { return pool().take_back(task); }

Status execute_dispatch(const KernelDispatch& dispatch) {
  const etm_cpu_launch& l = dispatch.launch;
  const uint64_t group_count = uint64_t{l.groups[0]} * l.groups[1] * l.groups[2];
  if (group_count == 0) return Status();
  if (dispatch.threadgroup_bytes > kThreadgroupMemoryLimit + (dispatch.validation ? kValidationArenaSlack : 0)) {
    return Status::error("kernel '" + *dispatch.kernel_name + "' needs " +
                         std::to_string(dispatch.threadgroup_bytes) +
                         " bytes of threadgroup memory; the limit is " +
                         std::to_string(kThreadgroupMemoryLimit));
  }
  const uint64_t threads = uint64_t{l.grid[0]} * l.grid[1] * l.grid[2];
  const unsigned workers = pool().thread_count();
  const bool per_group = dispatch.use_fibers || dispatch.regions_entry;
  const bool parallel = worth_spreading(group_count, threads, per_group);
  // Small enough that the thread taking the last chunk keeps the others waiting briefly.
  const uint64_t chunk = per_group ? 1 : std::max<uint64_t>(1, group_count / (uint64_t{workers} * 32));
  // Side by side, a worker takes at most its share of the groups, so that every worker gets some.
  const uint32_t batch_groups =
      static_cast<uint32_t>(std::clamp<uint64_t>(parallel ? group_count / workers : group_count, 1, kBatchGroups));
  Job job(dispatch, group_count, chunk, batch_groups);
  pool().run(&job, parallel);
  if (job.failed()) return Status::error(job.error());
  return Status();
}

// ------------------------------------------------------------- the lane calls

namespace {

void lane_threadgroup_barrier() {
  ExecutionContext* context = tl_worker.context;
  if (!context) return;  // not inside a dispatch
  if (!context->scheduler) {
    context->job->fail(
        "called threadgroup_barrier, but the kernel was prepared for the loop path (or as barrier regions)");
    return;
  }
  Fiber* fiber = context->scheduler->current();
  fiber->state = FiberState::at_barrier;
  context->scheduler->park(fiber);
  ++fiber->barriers;
}

void lane_simd_exchange(const void* site, const void* value, uint32_t size, etm_cpu_simd_view* out) {
  ExecutionContext* context = tl_worker.context;
  if (size > kMaxExchangeBytes || !context || !context->scheduler) {
    // Not a collective this executor can run: answer as a lone active lane, and fail the
    // dispatch (when there is one) so the result is never used.
    static ETM_THREAD_LOCAL unsigned char alone[kExchangeBufferBytes];
    std::memset(alone, 0, sizeof alone);
    std::memcpy(alone, value, std::min<uint32_t>(size, kMaxExchangeBytes));
    out->values = alone;
    out->active = 1;
    out->lane = 0;
    out->width = kSimdWidth;
    if (context) {
      context->job->fail(size > kMaxExchangeBytes
                             ? "a SIMD-group exchange of " + std::to_string(size) +
                                   " bytes exceeds the 64-byte limit"
                             : std::string("called a SIMD-group function, but the kernel was "
                                           "prepared for the loop path (or as barrier regions)"));
    }
    return;
  }
  Fiber* fiber = context->scheduler->current();
  fiber->site = site;
  fiber->value = value;
  fiber->size = size;
  fiber->view = out;
  fiber->state = FiberState::at_exchange;
  context->scheduler->park(fiber);
  ++fiber->simd_syncs;
}

}  // namespace

bool current_kernel_thread(uint32_t* index, uint32_t* barriers, uint32_t* simd_syncs) {
  const ExecutionContext* context = tl_worker.context;
  const Fiber* fiber = context && context->scheduler ? context->scheduler->current() : nullptr;
  if (!fiber) return false;
  *index = fiber->index;
  *barriers = fiber->barriers;
  if (simd_syncs) *simd_syncs = fiber->simd_syncs;
  return true;
}

namespace {

int group_await_request(etm_cpu_group_request* request) {
  ExecutionContext* context = tl_worker.context;
  return context && context->batch && context->batch->await(request) ? 1 : 0;
}

}  // namespace

const etm_cpu_group_calls& executor_group_calls() {
  static const etm_cpu_group_calls calls = {group_await_request};
  return calls;
}

const etm_cpu_lane_calls& executor_lane_calls() {
  static const etm_cpu_lane_calls calls = {lane_threadgroup_barrier, lane_simd_exchange};
  return calls;
}

}  // namespace etm::device::cpu
