#include "device/cpu/cpu_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "device/cpu/cpu_executor.h"
#include "device/cpu/cpu_pipeline.h"
#include "device/cpu/dispatch_counters.h"
#include "device/cpu/dispatch_overlap.h"

namespace etm::device::cpu {
namespace {

constexpr size_t kAlignment = 16384;  // matches Metal's page size on Apple silicon
// Inaccessible address space on each side of an allocation: a kernel that runs off its buffer
// faults there instead of writing into another allocation or the host heap.
constexpr size_t kGuardBytes = 256 * 1024;

// Shared memory with guard zones: [guard][length bytes, kAlignment-aligned][guard], mapped
// PROT_NONE except the middle.
class HostBuffer final : public Buffer {
 public:
  static std::shared_ptr<HostBuffer> map(size_t length) {
    const size_t reserved = kGuardBytes + kAlignment + length + kGuardBytes;
    void* region = mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(region);
    const uintptr_t start = (base + kGuardBytes + kAlignment - 1) / kAlignment * kAlignment;
    if (mprotect(reinterpret_cast<void*>(start), length, PROT_READ | PROT_WRITE) != 0) {
      munmap(region, reserved);
      return nullptr;
    }
    return std::shared_ptr<HostBuffer>(
        new HostBuffer(region, reserved, reinterpret_cast<void*>(start), length));
  }
  ~HostBuffer() override { munmap(region_, reserved_); }
  void* contents() override { return memory_; }
  size_t length() const override { return length_; }

 private:
  HostBuffer(void* region, size_t reserved, void* memory, size_t length)
      : region_(region), reserved_(reserved), memory_(memory), length_(length) {}
  void* region_;
  size_t reserved_;
  void* memory_;
  size_t length_;
};

// An argument table slot. Longer set_bytes data lives in the command buffer's byte pool, so
// that recording a dispatch allocates nothing once the pools have grown. The buffer is held
// by the recording (Recording::retain).
struct BoundBuffer {
  HostBuffer* buffer = nullptr;  // (final: reading its address and length is no virtual call)
  size_t offset = 0;       // into `buffer`, or into the byte pool for longer set_bytes data
  size_t bytes_length = 0; // non-zero: set_bytes data
  size_t extent = SIZE_MAX; // bytes from offset that belong to what was bound
  // set_bytes data of up to 16 bytes (scalars, small vectors: most of it), 16-byte aligned as
  // any scalar or vector the kernel reads there needs.
  static constexpr size_t kInlineBytes = 16;
  alignas(16) unsigned char value[kInlineBytes];
};

struct DispatchCommand {
  CpuPipeline* pipeline;  // held by the recording
  uint32_t first_binding;  // in Recording::bindings
  uint32_t binding_count;
  uint32_t first_threadgroup_length;
  uint32_t threadgroup_length_count;
  Size3 grid;
  Size3 group;
  bool after_barrier;  // a memory_barrier() came between it and the dispatch before it
};

// Commands refer to what the recording holds: they need no destructor, so clearing a
// recording is one step however many commands it has.
struct CopyCommand {
  Buffer* source;
  size_t source_offset;
  Buffer* destination;
  size_t destination_offset;
  size_t length;
};

struct FillCommand {
  Buffer* destination;
  size_t offset;
  size_t length;
  uint8_t value;
};

using Command = std::variant<DispatchCommand, CopyCommand, FillCommand>;

class DispatchLane;

// What a command buffer records: its commands, and every dispatch's argument table and
// threadgroup-memory lengths, stored one after another.
struct Recording {
  std::vector<Command> commands;
  std::vector<BoundBuffer> bindings;
  std::vector<unsigned char> bytes;
  std::vector<size_t> threadgroup_lengths;
  DispatchArgs args;  // scratch space for running the dispatches
  // Where dispatches run beside the queue thread's commands; kept, like `args`, across uses.
  std::vector<std::unique_ptr<DispatchLane>> lanes;
  // What the dispatches use, held until the command buffer completes: each buffer once however
  // many dispatches bind it, each pipeline about once (a reference count per binding cost more).
  std::vector<std::shared_ptr<Buffer>> retained_buffers;
  std::vector<std::shared_ptr<Pipeline>> retained_pipelines;
  // The buffers of retained_buffers as an open-addressing set: a power of two of slots, at most
  // half of them taken. (A cache of recent buffers would hold some twice, when they collide.)
  std::vector<const Buffer*> retained_set = std::vector<const Buffer*>(128);
  const Pipeline* last_pipeline = nullptr;  // in retained_pipelines

  static size_t set_position(const Buffer* buffer, size_t mask) {
    return (reinterpret_cast<uintptr_t>(buffer) >> 4) * 0x9e3779b97f4a7c15ull >> 32 & mask;
  }

  // Every buffer of this device is a HostBuffer (new_buffer makes them all).
  HostBuffer* retain(const std::shared_ptr<Buffer>& buffer) {
    auto* raw = static_cast<HostBuffer*>(buffer.get());
    if (!raw) return nullptr;
    const size_t mask = retained_set.size() - 1;
    for (size_t i = set_position(raw, mask); retained_set[i] != raw; i = (i + 1) & mask) {
      if (!retained_set[i]) {
        add_retained(buffer, i);
        break;
      }
    }
    return raw;
  }

  // `buffer` goes into the free slot `i` of retained_set.
  void add_retained(const std::shared_ptr<Buffer>& buffer, size_t i) {
    retained_set[i] = buffer.get();
    retained_buffers.push_back(buffer);
    if (retained_buffers.size() * 2 <= retained_set.size()) return;
    retained_set.assign(retained_set.size() * 2, nullptr);
    const size_t mask = retained_set.size() - 1;
    for (const std::shared_ptr<Buffer>& held : retained_buffers) {
      size_t k = set_position(held.get(), mask);
      while (retained_set[k]) k = (k + 1) & mask;
      retained_set[k] = held.get();
    }
  }

  CpuPipeline* retain(const std::shared_ptr<Pipeline>& pipeline) {
    if (pipeline && pipeline.get() != last_pipeline) {
      retained_pipelines.push_back(pipeline);
      last_pipeline = pipeline.get();
    }
    return static_cast<CpuPipeline*>(pipeline.get());
  }

  // Room for a command buffer of the default commit policy (40 dispatches of a few
  // arguments), so that recording one does not regrow the tables as it goes.
  Recording() {
    commands.reserve(64);
    bindings.reserve(256);
    bytes.reserve(1024);
    threadgroup_lengths.reserve(16);
    retained_buffers.reserve(64);
    retained_pipelines.reserve(16);
  }

  void clear() {
    commands.clear();
    bindings.clear();
    bytes.clear();
    threadgroup_lengths.clear();
    if (retained_buffers.size() * 16 >= retained_set.size()) {
      std::fill(retained_set.begin(), retained_set.end(), nullptr);
    } else {
      // A few buffers in a table grown for a larger command buffer: find each (every one is
      // there, so a slot emptied before it on its path is skipped over).
      const size_t mask = retained_set.size() - 1;
      for (const std::shared_ptr<Buffer>& held : retained_buffers) {
        size_t k = set_position(held.get(), mask);
        while (retained_set[k] != held.get()) k = (k + 1) & mask;
        retained_set[k] = nullptr;
      }
    }
    retained_buffers.clear();
    retained_pipelines.clear();
    last_pipeline = nullptr;
  }
};

// A buffer a dispatch binds, and whether its kernel may write it.
struct BufferUse {
  const Buffer* buffer;
  bool written;
};

class OverlappedExecution;

// A dispatch of a command buffer running on a pool worker while the queue thread goes on with
// the commands after it (or on the queue thread, when it needs the result before a worker
// took it).
struct DispatchLane final : WorkerTask {
  void run() override;

  // Set by the queue thread before the worker takes it, read by the worker.
  OverlappedExecution* owner = nullptr;
  const Recording* recorded = nullptr;
  const DispatchCommand* command = nullptr;
  size_t index = 0;  // of the command in its recording
  std::vector<BufferUse> uses;
  DispatchArgs args;  // scratch space, as Recording::args
  // Set by the worker, read by the queue thread once `busy` is false.
  Status status;
  ExecutionTimes::Interval ran;
  bool busy = false;  // guarded by the owner's mutex
};

// The recordings of a queue's finished command buffers, for its next ones: their vectors keep
// their capacity, so that recording allocates nothing once they have grown. Shared by the
// queue and its command buffers (a command buffer may outlive its queue).
class RecordingPool {
 public:
  std::unique_ptr<Recording> take() {
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        std::unique_ptr<Recording> recording = std::move(spare_.back());
        spare_.pop_back();
        return recording;
      }
    }
    return std::make_unique<Recording>();
  }
  void give_back(std::unique_ptr<Recording> recording) {
    recording->clear();
    std::lock_guard lock(mutex_);
    if (spare_.size() < kMaxSpare) spare_.push_back(std::move(recording));
  }

 private:
  // Encoding usually runs ahead of execution by several command buffers: when the queue
  // catches up, their recordings wait here for the next ones.
  static constexpr size_t kMaxSpare = 16;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Recording>> spare_;
};

class HostCommandBuffer;

// Records dispatches; bindings persist between dispatches like a Metal encoder's.
class HostComputeEncoder final : public ComputeEncoder {
 public:
  explicit HostComputeEncoder(Recording& recorded) : recorded_(recorded) {}

  void set_pipeline(std::shared_ptr<Pipeline> pipeline) override { pipeline_ = recorded_.retain(pipeline); }
  void set_buffer(std::shared_ptr<Buffer> buffer, size_t offset, uint32_t index) override {
    BoundBuffer& bound = slot(index);
    bound.buffer = recorded_.retain(buffer);
    bound.offset = offset;
    bound.bytes_length = 0;
    bound.extent = SIZE_MAX;
  }
  void set_buffer_extent(size_t length, uint32_t index) override { slot(index).extent = length; }
  void set_bytes(const void* data, size_t length, uint32_t index) override {
    BoundBuffer& bound = slot(index);
    bound.buffer = nullptr;
    record_bytes(bound, data, length);
  }
  void set_threadgroup_memory_length(size_t length, uint32_t index) override {
    if (threadgroup_lengths_.size() <= index) threadgroup_lengths_.resize(index + 1, 0);
    threadgroup_lengths_[index] = length;
  }
  void dispatch_threads(Size3 grid, Size3 group) override {
    DispatchCommand command{pipeline_,
                            static_cast<uint32_t>(recorded_.bindings.size()),
                            static_cast<uint32_t>(bindings_.size()),
                            static_cast<uint32_t>(recorded_.threadgroup_lengths.size()),
                            static_cast<uint32_t>(threadgroup_lengths_.size()),
                            grid,
                            group,
                            std::exchange(barrier_pending_, false)};
    for (const BoundBuffer& bound : bindings_) recorded_.bindings.push_back(bound);
    for (size_t length : threadgroup_lengths_) recorded_.threadgroup_lengths.push_back(length);
    recorded_.commands.emplace_back(command);
  }
  void dispatch_threadgroups(Size3 groups, Size3 group) override {
    dispatch_threads(Size3{groups.x * group.x, groups.y * group.y, groups.z * group.z}, group);
  }
  // Appends the argument table to the recording directly (the per-argument bindings are
  // neither read nor kept).
  void dispatch(const DispatchDescription& work) override {
    const Size3 group = work.group;
    const Size3 grid = work.whole_groups ? Size3{work.size.x * group.x, work.size.y * group.y, work.size.z * group.z}
                                         : work.size;
    recorded_.commands.emplace_back(DispatchCommand{recorded_.retain(*work.pipeline),
                                                    static_cast<uint32_t>(recorded_.bindings.size()),
                                                    work.argument_count,
                                                    static_cast<uint32_t>(recorded_.threadgroup_lengths.size()),
                                                    work.threadgroup_length_count,
                                                    grid,
                                                    group,
                                                    std::exchange(barrier_pending_, false)});
    for (uint32_t i = 0; i < work.argument_count; ++i) {
      const ArgumentBinding& argument = work.arguments[i];
      BoundBuffer& bound = recorded_.bindings.emplace_back();
      if (argument.bytes_length) {
        record_bytes(bound, argument.bytes, argument.bytes_length);
      } else {
        bound.buffer = recorded_.retain(argument.buffer);
        bound.offset = argument.offset;
        bound.extent = argument.extent;
      }
    }
    if (work.threadgroup_length_count) {
      recorded_.threadgroup_lengths.insert(recorded_.threadgroup_lengths.end(), work.threadgroup_lengths,
                                           work.threadgroup_lengths + work.threadgroup_length_count);
    }
  }
  // Dispatches on either side of a barrier never overlap (dispatch_overlap.h).
  void memory_barrier() override { barrier_pending_ = true; }

 private:
  BoundBuffer& slot(uint32_t index) {
    if (bindings_.size() <= index) bindings_.resize(index + 1);
    return bindings_[index];
  }

  // Copies set_bytes data into `bound`, or into the byte pool when it is longer.
  void record_bytes(BoundBuffer& bound, const void* data, size_t length) {
    bound.bytes_length = length;
    if (length == sizeof(int64_t)) {
      std::memcpy(bound.value, data, sizeof(int64_t));  // set_arg_int's: inline, no library call
      return;
    }
    if (length <= BoundBuffer::kInlineBytes) {
      std::memcpy(bound.value, data, length);
      return;
    }
    // 16-byte aligned, as any scalar or vector the kernel reads there needs.
    bound.offset = (recorded_.bytes.size() + 15) / 16 * 16;
    recorded_.bytes.resize(bound.offset + length);
    std::memcpy(recorded_.bytes.data() + bound.offset, data, length);
  }

  Recording& recorded_;
  CpuPipeline* pipeline_ = nullptr;
  std::vector<BoundBuffer> bindings_;
  std::vector<size_t> threadgroup_lengths_;
  bool barrier_pending_ = false;
};

// `args` is scratch space reused across dispatches (its vectors keep their capacity).
Status run_dispatch(const DispatchCommand& command, const Recording& recorded, DispatchArgs& args) {
  args.buffers.resize(command.binding_count);
  args.buffer_lengths.resize(command.binding_count);
  args.device_memory.resize(command.binding_count);
  for (uint32_t i = 0; i < command.binding_count; ++i) {
    const BoundBuffer& bound = recorded.bindings[command.first_binding + i];
    void* address = nullptr;
    size_t length = 0;
    if (bound.buffer) {
      address = static_cast<unsigned char*>(bound.buffer->contents()) + bound.offset;
      length = std::min(bound.buffer->length() - bound.offset, bound.extent);
    } else if (bound.bytes_length) {
      address = const_cast<unsigned char*>(bound.bytes_length <= BoundBuffer::kInlineBytes
                                               ? bound.value
                                               : recorded.bytes.data() + bound.offset);
      length = bound.bytes_length;
    }
    args.buffers[i] = address;
    args.buffer_lengths[i] = length;
    args.device_memory[i] = bound.buffer ? 1 : 0;
  }
  const auto lengths = recorded.threadgroup_lengths.begin() + command.first_threadgroup_length;
  args.threadgroup_memory_lengths.assign(lengths, lengths + command.threadgroup_length_count);
  args.threads_per_group = command.group;
  args.grid = command.grid;
  Status status = command.pipeline->execute(args);
  if (!status.ok()) {
    const std::string named = "kernel '" + command.pipeline->name() + "'";
    if (status.message().rfind(named, 0) != 0) status = Status::error(named + ": " + status.message());
  }
  return status;  // the one object returned: no copy
}

Status run_command(const Command& command, Recording& recorded, DispatchArgs& args) {
  if (const auto* dispatch = std::get_if<DispatchCommand>(&command)) {
    if (!dispatch->pipeline) return Status::error("dispatch without a pipeline");
    return run_dispatch(*dispatch, recorded, args);
  }
  if (const auto* copy = std::get_if<CopyCommand>(&command)) {
    std::memmove(static_cast<unsigned char*>(copy->destination->contents()) + copy->destination_offset,
                 static_cast<unsigned char*>(copy->source->contents()) + copy->source_offset,
                 copy->length);
    return {};
  }
  const auto& fill = std::get<FillCommand>(command);
  std::memset(static_cast<unsigned char*>(fill.destination->contents()) + fill.offset, fill.value,
              fill.length);
  return {};
}

// Runs a recording's commands in order, except that a dispatch the pipeline lets overlap
// (CpuPipeline::may_overlap) starts on an idle worker, or on the queue thread while workers
// run earlier ones, when no memory barrier separates it from the dispatches still running and
// neither side writes a buffer the other binds. Copies, fills, barriers and other dispatches
// wait for everything before them. The first failure in command order is the outcome; no
// command starts after a failure is seen, and every started one finishes before run returns.
class OverlappedExecution {
 public:
  OverlappedExecution(Recording& recorded, ExecutionTimes* times) : recorded_(recorded), times_(times) {}

  Status run() {
    const std::vector<Command>& commands = recorded_.commands;
    if (times_) times_->commands.resize(commands.size());
    size_t started = 0;
    // The command being started and the one after it, as dispatches that may overlap others
    // (null where they may not); uses_ready: uses_ holds the current one's buffers.
    const DispatchCommand* dispatch = commands.empty() ? nullptr : overlapping_dispatch(commands[0]);
    bool uses_ready = false;
    for (; started < commands.size(); ++started) {
      if (failed_.load(std::memory_order_acquire)) break;
      const DispatchCommand* next =
          started + 1 < commands.size() ? overlapping_dispatch(commands[started + 1]) : nullptr;
      if (!dispatch || dispatch->after_barrier) wait_for_lanes(nullptr);
      // A worker only pays when the next command could run beside this one; otherwise the
      // next one would just wait for it.
      const bool next_may_join = next && !next->after_barrier;
      if (dispatch && (next_may_join || lanes_busy())) {
        if (!uses_ready) collect_uses(*dispatch, &uses_);
        wait_for_lanes(&uses_);
        if (next_may_join) {
          collect_uses(*next, &next_uses_);
          if (!conflict(uses_, next_uses_) && start_on_worker(*dispatch, started)) {
            uses_.swap(next_uses_);
            uses_ready = true;
            dispatch = next;
            continue;
          }
        }
      }
      const double start = times_ ? host_clock_us() : 0;
      Status status = run_command(commands[started], recorded_, recorded_.args);
      if (times_) times_->commands[started] = {start, host_clock_us()};
      if (!status.ok()) {
        std::lock_guard lock(mutex_);
        note_failure(started, std::move(status));
        ++started;
        break;
      }
      uses_ready = next_may_join && dispatch;  // next_uses_ holds the next one's buffers
      if (uses_ready) uses_.swap(next_uses_);
      dispatch = next;
    }
    wait_for_lanes(nullptr);
    // The last worker drops busy_lanes_ before it unlocks mutex_ (finished): until it has, this
    // object, on the queue thread's stack, must stay. Else its unlock writes into whatever frame
    // the queue thread has there next, or into a stack already unmapped after the thread exits.
    std::lock_guard last_worker_done(mutex_);
    if (times_) times_->commands.resize(started);  // those after a failure did not run
    return std::move(failure_);
  }

  // On the worker, as the lane's dispatch ends.
  void finished(DispatchLane* lane) {
    std::lock_guard lock(mutex_);
    if (times_) times_->commands[lane->index] = lane->ran;
    if (!lane->status.ok()) note_failure(lane->index, std::move(lane->status));
    lane->busy = false;
    // Release: the queue thread that sees the count drop sees the dispatch's writes.
    busy_lanes_.fetch_sub(1, std::memory_order_release);
    lane_finished_.notify_one();
  }

 private:
  // The command as a dispatch that may overlap others (CpuPipeline::may_overlap), or null.
  static const DispatchCommand* overlapping_dispatch(const Command& command) {
    const auto* dispatch = std::get_if<DispatchCommand>(&command);
    if (!dispatch || !dispatch->pipeline || !dispatch->pipeline->may_overlap(dispatch->grid, dispatch->group))
      return nullptr;
    return dispatch;
  }

  bool lanes_busy() const { return busy_lanes_.load(std::memory_order_acquire) != 0; }

  void collect_uses(const DispatchCommand& dispatch, std::vector<BufferUse>* uses) const {
    uses->clear();
    for (uint32_t i = 0; i < dispatch.binding_count; ++i) {
      const BoundBuffer& bound = recorded_.bindings[dispatch.first_binding + i];
      if (bound.buffer) uses->push_back({bound.buffer, dispatch.pipeline->writes_buffer(i)});
    }
  }

  static bool conflict(const std::vector<BufferUse>& a, const std::vector<BufferUse>& b) {
    for (const BufferUse& x : a) {
      for (const BufferUse& y : b) {
        if (x.buffer == y.buffer && (x.written || y.written)) return true;
      }
    }
    return false;
  }

  // Until no lane runs a dispatch that conflicts with `uses` (null: until all lanes are free).
  // Such a dispatch that no worker has started yet runs here instead: a busy machine may not
  // schedule the woken worker for a long time.
  void wait_for_lanes(const std::vector<BufferUse>* uses) {
    if (!lanes_busy()) return;
    for (const auto& lane : recorded_.lanes) {
      bool blocks;
      {
        std::lock_guard lock(mutex_);
        blocks = lane->busy && (!uses || conflict(lane->uses, *uses));
      }
      if (blocks && take_back_from_workers(lane.get())) lane->run();
    }
    std::unique_lock lock(mutex_);
    lane_finished_.wait(lock, [&] {
      for (const auto& lane : recorded_.lanes) {
        if (lane->busy && (!uses || conflict(lane->uses, *uses))) return false;
      }
      return true;
    });
  }

  bool start_on_worker(const DispatchCommand& dispatch, size_t index) {
    DispatchLane* lane = free_lane();
    if (!lane) return false;
    lane->owner = this;
    lane->recorded = &recorded_;
    lane->command = &dispatch;
    lane->index = index;
    lane->uses.swap(uses_);
    {
      std::lock_guard lock(mutex_);
      lane->busy = true;
      busy_lanes_.fetch_add(1, std::memory_order_relaxed);
    }
    if (run_on_idle_worker(lane)) return true;
    std::lock_guard lock(mutex_);
    lane->busy = false;
    busy_lanes_.fetch_sub(1, std::memory_order_relaxed);
    lane->uses.swap(uses_);
    return false;
  }

  // A lane that runs nothing (only this thread makes lanes busy), while the pool has workers.
  DispatchLane* free_lane() {
    std::vector<std::unique_ptr<DispatchLane>>& lanes = recorded_.lanes;
    std::lock_guard lock(mutex_);
    for (const auto& lane : lanes) {
      if (!lane->busy) return lane.get();
    }
    if (lanes.size() + 1 >= executor_threads()) return nullptr;
    lanes.push_back(std::make_unique<DispatchLane>());
    return lanes.back().get();
  }

  // Under mutex_: keeps the failure of the earliest command.
  void note_failure(size_t index, Status status) {
    if (index >= failed_index_) return;
    failed_index_ = index;
    failure_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }

  Recording& recorded_;
  ExecutionTimes* times_;  // null when not timed
  std::vector<BufferUse> uses_;  // of the dispatch being started
  std::vector<BufferUse> next_uses_;  // of the command after it
  std::mutex mutex_;
  std::condition_variable lane_finished_;
  std::atomic<unsigned> busy_lanes_{0};  // changed under mutex_, read without it
  size_t failed_index_ = SIZE_MAX;
  Status failure_;
  std::atomic<bool> failed_{false};  // failed_index_ is set
};

void DispatchLane::run() {
  ran.start_us = host_clock_us();
  status = run_dispatch(*command, *recorded, args);
  ran.end_us = host_clock_us();
  owner->finished(this);
}

class HostCommandQueue;

class HostCommandBuffer final : public CommandBuffer,
                                public std::enable_shared_from_this<HostCommandBuffer> {
 public:
  HostCommandBuffer(std::weak_ptr<HostCommandQueue> queue, std::shared_ptr<RecordingPool> pool)
      : queue_(std::move(queue)),
        pool_(std::move(pool)),
        recorded_(pool_->take()),
        encoder_(*recorded_) {}
  ~HostCommandBuffer() override { pool_->give_back(std::move(recorded_)); }

  ComputeEncoder& compute_encoder() override { return encoder_; }
  void copy_buffer(std::shared_ptr<Buffer> source, size_t source_offset,
                   std::shared_ptr<Buffer> destination, size_t destination_offset,
                   size_t length) override {
    recorded_->commands.push_back(CopyCommand{recorded_->retain(source), source_offset, recorded_->retain(destination),
                                    destination_offset, length});
  }
  void fill_buffer(std::shared_ptr<Buffer> destination, size_t offset, size_t length,
                   uint8_t value) override {
    recorded_->commands.push_back(FillCommand{recorded_->retain(destination), offset, length, value});
  }
  void add_completed_handler(std::function<void(const Status&)> handler) override {
    handlers_.push_back(std::move(handler));
  }
  void record_execution_times() override { timed_ = true; }
  ExecutionTimes execution_times() const override {
    std::lock_guard lock(mutex_);
    return times_;
  }
  void commit() override;
  void wait_until_completed() override {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return state_ == CommandBufferState::completed ||
                                  state_ == CommandBufferState::failed ||
                                  state_ == CommandBufferState::recording; });
  }
  CommandBufferState state() const override {
    std::lock_guard lock(mutex_);
    return state_;
  }
  Status error() const override {
    std::lock_guard lock(mutex_);
    return error_;
  }

  // On the queue thread: run every command, stop at the first failure, then notify.
  void execute() {
    Status status;
    ExecutionTimes times;
    if (timed_) {
      times.commands.reserve(recorded_->commands.size());
      times.buffer.start_us = host_clock_us();
    }
    if (overlap_enabled() && executor_threads() > 1) {
      status = OverlappedExecution(*recorded_, timed_ ? &times : nullptr).run();
    } else {
      for (const Command& command : recorded_->commands) {
        const double start = timed_ ? host_clock_us() : 0;
        status = run_command(command, *recorded_, recorded_->args);
        if (timed_) times.commands.push_back({start, host_clock_us()});
        if (!status.ok()) break;
      }
    }
    if (timed_) {
      times.buffer.end_us = host_clock_us();
      std::lock_guard lock(mutex_);
      times_ = std::move(times);
    }
    recorded_->clear();
    for (auto& handler : handlers_) handler(status);
    handlers_.clear();
    std::lock_guard lock(mutex_);
    state_ = status.ok() ? CommandBufferState::completed : CommandBufferState::failed;
    error_ = status;
    done_.notify_all();
  }

 private:
  // Weak: the queue thread must never hold the last reference to its own queue.
  std::weak_ptr<HostCommandQueue> queue_;
  std::shared_ptr<RecordingPool> pool_;
  std::unique_ptr<Recording> recorded_;
  HostComputeEncoder encoder_;
  std::vector<std::function<void(const Status&)>> handlers_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  CommandBufferState state_ = CommandBufferState::recording;
  Status error_;
  bool timed_ = false;
  ExecutionTimes times_;
};

// One thread per queue runs committed command buffers in commit order.
class HostCommandQueue final : public CommandQueue,
                               public std::enable_shared_from_this<HostCommandQueue> {
 public:
  HostCommandQueue() : thread_([this] { run(); }) {}
  ~HostCommandQueue() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }

  std::shared_ptr<CommandBuffer> new_command_buffer() override {
    return std::make_shared<HostCommandBuffer>(weak_from_this(), recordings_);
  }

  void submit(std::shared_ptr<HostCommandBuffer> buffer) {
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(buffer));
    }
    ready_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      std::shared_ptr<HostCommandBuffer> next;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty()) return;
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      next->execute();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<HostCommandBuffer>> pending_;
  const std::shared_ptr<RecordingPool> recordings_ = std::make_shared<RecordingPool>();
  bool stopping_ = false;
  std::thread thread_;
};

void HostCommandBuffer::commit() {
  {
    std::lock_guard lock(mutex_);
    if (state_ != CommandBufferState::recording) return;
    state_ = CommandBufferState::committed;
  }
  if (auto queue = queue_.lock()) {
    queue->submit(shared_from_this());
    return;
  }
  for (auto& handler : handlers_) handler(Status::error("the command queue was destroyed"));
  handlers_.clear();
  std::lock_guard lock(mutex_);
  state_ = CommandBufferState::failed;
  error_ = Status::error("the command queue was destroyed");
  done_.notify_all();
}

class HostDevice final : public Device {
 public:
  HostDevice() {
    const long threads = sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__x86_64__)
    const char* isa = "x86_64";
#elif defined(__aarch64__)
    const char* isa = "arm64";
#else
    const char* isa = "unknown";
#endif
    name_ = "CPU (" + std::string(isa) + ", " + std::to_string(threads > 0 ? threads : 1) +
            " threads)";
  }
  const std::string& name() const override { return name_; }
  const char* kind() const override { return "cpu"; }
  std::string architecture() const override { return "cpu"; }
  size_t recommended_max_working_set_size() const override {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return size_t{1} << 32;
    return static_cast<size_t>(pages) * static_cast<size_t>(page_size) / 4 * 3;
  }

  Status new_buffer(size_t length, std::shared_ptr<Buffer>* out) override {
    if (length > SIZE_MAX / 2) return Status::error("buffer length " + std::to_string(length) + " is too large");
    const size_t rounded = std::max(kAlignment, (length + kAlignment - 1) / kAlignment * kAlignment);
    *out = HostBuffer::map(rounded);
    if (!*out) return Status::error("out of memory allocating " + std::to_string(length) + " bytes");
    return {};
  }
  // Caller memory is never bound in place: nothing could stop a kernel's stray write from
  // running past it into the caller's heap. Callers copy into device memory instead.
  Status new_buffer_no_copy(void*, size_t, std::shared_ptr<Buffer>* out) override {
    out->reset();
    return {};
  }
  Status new_library(const std::string& source, std::shared_ptr<Library>* out) override {
    return compile_msl_library(source, out);
  }
  std::shared_ptr<CommandQueue> new_command_queue() override {
    return std::make_shared<HostCommandQueue>();
  }
  Status begin_counters() override { return begin_counting(); }
  Status end_counters(std::vector<DispatchCounters>* out) override { return end_counting(out); }

 private:
  std::string name_;
};

}  // namespace

Status create_cpu_device(std::unique_ptr<Device>* out) {
  *out = std::make_unique<HostDevice>();
  return {};
}

}  // namespace etm::device::cpu
