#include "runtime/stream.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/error.h"
#include "runtime/library.h"
#include "runtime/trace.h"

namespace etm {
namespace {

// Lane `lane` (1 and up) of a stream's trace track: a track of its own, made on first use.
uint32_t lane_track(uint32_t stream_track, const std::string& stream_name, size_t lane) {
  static std::mutex mutex;
  static std::map<std::pair<uint32_t, size_t>, uint32_t> tracks;
  std::lock_guard lock(mutex);
  auto [found, added] = tracks.try_emplace({stream_track, lane}, 0);
  if (added) found->second = trace::new_track(concat(stream_name, ", overlapping lane ", lane));
  return found->second;
}

std::string stream_track_name(const device::Device& device) {
  return concat(device.kind(), " device: stream of host thread ", trace::thread_track());
}

}  // namespace

Stream::Stream(device::Device& device, CommitPolicy policy, WriteOrder& order)
    : device_(device),
      queue_(device.new_command_queue()),
      policy_(policy),
      write_order_(order),
      progress_(std::make_shared<StreamProgress>()),
      arguments_(kMaxArguments),
      argument_bytes_(kMaxArguments),
      tracing_(trace::enabled()),
      shared_(std::make_shared<Shared>()) {
  ETM_REQUIRE(queue_, "the device could not create a command queue");
  if (tracing_) {
    trace_track_ = trace::new_track(stream_track_name(device));
  }
}

Stream::~Stream() {
  try {
    wait_idle();
  } catch (...) {
    // A thread exiting with unreported errors has nobody left to report them to.
  }
}

device::CommandBuffer& Stream::open_command_buffer() {
  if (!open_) {
    open_ = queue_->new_command_buffer();
    ETM_REQUIRE(open_, "the device could not create a command buffer");
    open_commands_ = 0;
    open_bytes_ = 0;
    uses_.clear();
    if (tracing_) {
      open_->record_execution_times();
      traced_.clear();
    }
  }
  return *open_;
}

// Waits for other streams once per buffer and command buffer (and once more on its first
// write there), so that the shared WriteOrder stays off the per-dispatch path.
BufferUses::Use& Stream::note_buffer_use(const device::Buffer* buffer, bool writing) {
  uses_.reserve(1);
  bool first_use;
  BufferUses::Use& use = uses_.find_or_add(buffer, &first_use);
  if (first_use || (writing && !use.written)) order_first_use(use, first_use, writing);
  return use;
}

void Stream::order_first_use(BufferUses::Use& use, bool first_use, bool writing) {
  const auto* buffer = static_cast<const device::Buffer*>(use.buffer);
  use.written = use.written || writing;
  if (first_use) open_bytes_ += static_cast<int64_t>(buffer->length());
  write_order_.wait_before_use(buffer, progress_.get(), writing);
}

void Stream::wait_for_other_streams(const BufferPtr& buffer) {
  if (buffer) write_order_.wait_before_use(buffer.get(), progress_.get(), true);
}

void Stream::start_encoding(KernelFunction* kernel) {
  encoding_kernel_ = kernel;
  held_arguments_ = std::max(held_arguments_, argument_count_);
  argument_count_ = 0;
  set_arguments_ = 0;
  threadgroup_memory_.clear();
}

void Stream::release_argument_buffers() {
  for (size_t i = 0; i < std::max(held_arguments_, argument_count_); ++i) arguments_[i].buffer.reset();
  held_arguments_ = 0;
}

void Stream::require_encoding(const KernelFunction* kernel) const {
  ETM_REQUIRE(encoding_kernel_ == kernel, "kernel '", kernel->name(),
              "' is not being encoded on this thread: call aoti_torch_mps_start_encoding first");
}

device::ArgumentBinding& Stream::argument_slot(KernelFunction* kernel, unsigned index) {
  require_encoding(kernel);
  ETM_REQUIRE(index < kMaxArguments, "argument index ", index, " of kernel '", kernel->name(),
              "' is out of range (at most ", kMaxArguments - 1, ")");
  argument_count_ = std::max<size_t>(argument_count_, index + 1);
  set_arguments_ |= uint32_t{1} << index;
  return arguments_[index];
}

void Stream::set_argument_buffer(KernelFunction* kernel, unsigned index, const BufferPtr& buffer,
                                 size_t offset, size_t extent) {
  device::ArgumentBinding& argument = argument_slot(kernel, index);
  if (argument.buffer != buffer) argument.buffer = buffer;
  argument.offset = offset;
  argument.extent = extent;
  argument.bytes_length = 0;
}

void Stream::set_argument_bytes(KernelFunction* kernel, unsigned index, const void* data,
                                size_t length) {
  ETM_REQUIRE(length > 0 && length <= kMaxBytesArgument, "argument of ", length,
              " bytes: by-value arguments hold 1 to ", kMaxBytesArgument, " bytes");
  device::ArgumentBinding& argument = argument_slot(kernel, index);
  argument.buffer.reset();
  std::vector<unsigned char>& bytes = argument_bytes_[index];
  bytes.resize(length);
  if (length == sizeof(int64_t))
    std::memcpy(bytes.data(), data, sizeof(int64_t));  // set_arg_int's: inline, no library call
  else
    std::memcpy(bytes.data(), data, length);
  argument.bytes = bytes.data();
  argument.bytes_length = length;
}

void Stream::set_threadgroup_memory(KernelFunction* kernel, unsigned index, size_t length) {
  require_encoding(kernel);
  ETM_REQUIRE(index < kMaxArguments, "threadgroup memory index ", index, " is out of range");
  ETM_REQUIRE(length <= kMaxThreadgroupMemory, "threadgroup memory of ", length,
              " bytes exceeds the ", kMaxThreadgroupMemory, "-byte limit");
  if (threadgroup_memory_.size() <= index) threadgroup_memory_.resize(index + 1, 0);
  threadgroup_memory_[index] = length;
}

void Stream::dispatch(KernelFunction* kernel, device::Size3 grid, device::Size3 group) {
  encode_dispatch(kernel, grid, group, false);
}

void Stream::dispatch_groups(KernelFunction* kernel, device::Size3 groups, device::Size3 group) {
  encode_dispatch(kernel, groups, group, true);
}

namespace {

// Thread positions are 32-bit in MSL (uint3): a grid dimension must be addressable by one.
constexpr uint64_t kMaxGridDimension = UINT32_MAX;

bool any_zero(device::Size3 size) { return size.x == 0 || size.y == 0 || size.z == 0; }

}  // namespace

void Stream::encode_dispatch(KernelFunction* kernel, device::Size3 size, device::Size3 group,
                             bool whole_groups) {
  require_encoding(kernel);
  for (size_t i = argument_count_; i < held_arguments_; ++i) arguments_[i].buffer.reset();
  held_arguments_ = argument_count_;
  const uint32_t all_set = (uint32_t{1} << argument_count_) - 1;  // argument_count_ <= 31
  if (set_arguments_ != all_set) {
    const int unset = __builtin_ctz(~set_arguments_);
    fail("argument ", unset, " of kernel '", kernel->name(), "' is not set");
  }
  if (any_zero(size)) return;  // nothing to run; Metal rejects empty grids
  const uint64_t max_threads = kernel->max_threads_per_group();
  ETM_REQUIRE(!any_zero(group), "threadgroup size must be positive");
  ETM_REQUIRE(group.x <= max_threads && group.y <= max_threads && group.z <= max_threads &&
                  group.volume() <= max_threads,
              "threadgroup of ", group.x, "x", group.y, "x", group.z, " threads exceeds kernel '",
              kernel->name(), "''s maximum of ", max_threads);
  device::Size3 threads = size;
  if (whole_groups) {
    ETM_REQUIRE(!__builtin_mul_overflow(size.x, group.x, &threads.x) &&
                    !__builtin_mul_overflow(size.y, group.y, &threads.y) &&
                    !__builtin_mul_overflow(size.z, group.z, &threads.z),
                "dispatch of ", size.x, "x", size.y, "x", size.z, " threadgroups overflows");
  }
  uint64_t plane, volume;
  ETM_REQUIRE(threads.x <= kMaxGridDimension && threads.y <= kMaxGridDimension &&
                  threads.z <= kMaxGridDimension &&
                  !__builtin_mul_overflow(threads.x, threads.y, &plane) &&
                  !__builtin_mul_overflow(plane, threads.z, &volume),
              "grid of ", threads.x, "x", threads.y, "x", threads.z,
              " threads is too large (at most ", kMaxGridDimension,
              " per dimension, and a total that fits 64 bits)");
  size_t threadgroup_bytes = kernel->static_threadgroup_bytes();
  for (size_t length : threadgroup_memory_) threadgroup_bytes += length;
  ETM_REQUIRE(threadgroup_bytes <= kMaxThreadgroupMemory, "kernel '", kernel->name(), "' needs ",
              threadgroup_bytes, " bytes of threadgroup memory, more than the ",
              kMaxThreadgroupMemory, "-byte limit");

  device::CommandBuffer& command_buffer = open_command_buffer();
  device::ComputeEncoder& encoder = command_buffer.compute_encoder();
  // One look-up per buffer: its first use orders it after other streams' work, and a write to
  // a buffer bound since the last barrier, or a read of one written since, needs a new one.
  // (A device whose pipelines cannot tell reads from writes has every binding write.)
  BufferUses::Use* bound[kMaxArguments];
  bool bound_writing[kMaxArguments];
  size_t bound_count = 0;
  bool conflict = false;
  uses_.reserve(argument_count_);
  for (size_t i = 0; i < argument_count_; ++i) {
    const device::Buffer* buffer = arguments_[i].buffer.get();
    if (!buffer) continue;  // by-value data, or an empty tensor bound as nil
    // note_buffer_use, without a call per buffer when it is not new here.
    const bool writing = kernel->writes_buffer(static_cast<uint32_t>(i));
    bool first_use;
    BufferUses::Use& use = uses_.find_or_add(buffer, &first_use);
    if (first_use || (writing && !use.written)) order_first_use(use, first_use, writing);
    conflict = conflict || (use.interval == uses_.interval() && (writing || use.written_interval == uses_.interval()));
    bound_writing[bound_count] = writing;
    bound[bound_count++] = &use;
  }
  if (conflict) {
    encoder.memory_barrier();
    uses_.next_interval();
  }
  for (size_t i = 0; i < bound_count; ++i) {
    bound[i]->interval = uses_.interval();
    if (bound_writing[i]) bound[i]->written_interval = uses_.interval();
  }
  device::DispatchDescription work;
  work.pipeline = &kernel->pipeline();
  work.arguments = arguments_.data();
  work.argument_count = static_cast<uint32_t>(argument_count_);
  work.threadgroup_lengths = threadgroup_memory_.data();
  work.threadgroup_length_count = static_cast<uint32_t>(threadgroup_memory_.size());
  work.size = size;
  work.group = group;
  work.whole_groups = whole_groups;
  encoder.dispatch(work);
  if (tracing_) {
    const device::Size3 grid =
        whole_groups ? device::Size3{size.x * group.x, size.y * group.y, size.z * group.z} : size;
    size_t bound = 0;
    for (size_t i = 0; i < argument_count_; ++i) {
      const device::ArgumentBinding& argument = arguments_[i];
      bound += argument.bytes_length;
      if (argument.buffer) bound += argument.buffer->length() - argument.offset;
    }
    trace_command("dispatch", kernel->name(),
                  concat("\"grid\": [", grid.x, ", ", grid.y, ", ", grid.z, "], \"threadgroup\": [",
                         group.x, ", ", group.y, ", ", group.z, "], \"bytes_bound\": ", bound,
                         ", \"library\": ", trace::json_string(kernel->library()->label())));
  }
  count_command();
}

void Stream::count_command() {
  ++open_commands_;
  if (policy_.should_commit(open_commands_, open_bytes_)) commit_open();
}

void Stream::copy_buffer(BufferPtr source, size_t source_offset, BufferPtr destination,
                         size_t destination_offset, size_t length) {
  ETM_REQUIRE(source_offset <= source->length() && length <= source->length() - source_offset,
              "copy reads past the end of its source allocation");
  ETM_REQUIRE(destination_offset <= destination->length() &&
                  length <= destination->length() - destination_offset,
              "copy writes past the end of its destination allocation");
  if (length == 0) return;
  device::CommandBuffer& command_buffer = open_command_buffer();
  note_buffer_use(source.get(), false);
  note_buffer_use(destination.get(), true);
  command_buffer.copy_buffer(std::move(source), source_offset, std::move(destination),
                             destination_offset, length);
  uses_.next_interval();  // a blit ends the compute encoder; the next one starts fresh
  if (tracing_) trace_command("copy", "copy", concat("\"bytes\": ", length));
  count_command();
}

void Stream::fill_buffer(BufferPtr destination, size_t offset, size_t length, uint8_t value) {
  ETM_REQUIRE(offset <= destination->length() && length <= destination->length() - offset,
              "fill writes past the end of its allocation");
  if (length == 0) return;
  device::CommandBuffer& command_buffer = open_command_buffer();
  note_buffer_use(destination.get(), true);
  command_buffer.fill_buffer(std::move(destination), offset, length, value);
  uses_.next_interval();
  if (tracing_) trace_command("fill", "fill", concat("\"bytes\": ", length));
  count_command();
}

void Stream::encode_graph(const device::GraphWorkload& workload, const std::string& name) {
  ETM_REQUIRE(workload.output.buffer, "graph '", name, "' has no output buffer");
  for (const device::GraphOperand& input : workload.inputs)
    ETM_REQUIRE(input.buffer, "graph '", name, "' has an input without a buffer");
  device::CommandBuffer& command_buffer = open_command_buffer();
  for (const device::GraphOperand& input : workload.inputs) note_buffer_use(input.buffer.get(), false);
  note_buffer_use(workload.output.buffer.get(), true);
  const device::Status status = command_buffer.encode_graph(workload);
  ETM_REQUIRE(status.ok(), "graph '", name, "': ", status.message());
  uses_.next_interval();  // the graph ended the compute encoder; the next one starts fresh
  if (tracing_) trace_command("graph", name, concat("\"inputs\": ", workload.inputs.size()));
  count_command();
}

void Stream::commit_open() {
  if (!open_ || open_commands_ == 0) return;  // an empty buffer stays open for reuse
  std::vector<const device::Buffer*> written;
  std::vector<const device::Buffer*> read;
  written.reserve(uses_.size());
  read.reserve(uses_.size());
  uses_.for_each([&](const BufferUses::Use& use) {
    (use.written ? written : read).push_back(static_cast<const device::Buffer*>(use.buffer));
  });
  write_order_.record(progress_, progress_->next_sequence(), written, read);
  std::weak_ptr<Shared> shared = shared_;
  open_->add_completed_handler([shared, progress = progress_](const device::Status& status) {
    progress->completed();
    auto state = shared.lock();
    if (!state) return;
    if (!status.ok()) {
      std::lock_guard lock(state->mutex);
      if (state->sticky_error.empty()) state->sticky_error = "command buffer failed: " + status.message();
    }
    state->completed.fetch_add(1);
  });
  if (tracing_) trace_completion();
  open_->commit();
  progress_->committed();
  shared_->committed.fetch_add(1);
  last_committed_ = std::move(open_);
  open_.reset();
}

void Stream::wait_committed() {
  // One queue runs its command buffers in order: the last one finishing means all did.
  if (last_committed_) {
    const double start = tracing_ ? device::host_clock_us() : 0;
    last_committed_->wait_until_completed();
    last_committed_.reset();
    if (tracing_) {
      trace::span(trace::thread_track(), "wait", "wait", start, device::host_clock_us() - start, "");
    }
  }
}

void Stream::trace_command(std::string category, std::string name, std::string args_json) {
  traced_.push_back(TracedCommand{std::move(category), std::move(name), std::move(args_json)});
}

// Before commit: a commit mark on the encoding thread, and a handler that writes the
// buffer's commands with the times the device measured. The handler holds the buffer until
// it has run (handlers are released after they run, which ends the cycle).
void Stream::trace_completion() {
  const int64_t number = ++traced_buffers_;
  trace::instant(trace::thread_track(), "commit", "commit", device::host_clock_us(),
                 concat("\"command_buffer\": ", number, ", \"commands\": ", open_commands_,
                        ", \"bytes\": ", open_bytes_));
  open_->add_completed_handler(
      [buffer = open_, commands = std::move(traced_), track = trace_track_, name = stream_track_name(device_),
       number](const device::Status&) {
        const device::ExecutionTimes times = buffer->execution_times();
        const double start = times.buffer.start_us;
        trace::span(track, "command_buffer", concat("command buffer ", number), start,
                    times.buffer.end_us - start, concat("\"commands\": ", commands.size()));
        if (times.commands.empty()) {
          // Only the whole buffer is timed (Metal): its commands are marks at its start.
          for (const TracedCommand& command : commands)
            trace::instant(track, command.category, command.name, start, command.args_json);
          return;
        }
        // Commands after a failure did not run and have no times. A command that overlapped
        // an earlier one (the CPU device runs independent dispatches beside each other) goes
        // on the stream's first lane track free at its start: slices of one track never overlap.
        std::vector<double> lane_ends;  // per lane: when its last command ended
        for (size_t i = 0; i < commands.size() && i < times.commands.size(); ++i) {
          const device::ExecutionTimes::Interval& ran = times.commands[i];
          size_t lane = 0;
          while (lane < lane_ends.size() && lane_ends[lane] > ran.start_us) ++lane;
          if (lane == lane_ends.size()) lane_ends.push_back(0);
          lane_ends[lane] = ran.end_us;
          trace::span(lane == 0 ? track : lane_track(track, name, lane), commands[i].category, commands[i].name,
                      ran.start_us, ran.end_us - ran.start_us, commands[i].args_json);
        }
      });
  traced_.clear();
}

void Stream::wait_idle() {
  commit_open();
  wait_committed();
}

void Stream::add_completion_check(std::function<std::string()> check) {
  std::weak_ptr<Shared> shared = shared_;
  open_command_buffer().add_completed_handler(
      [shared, check = std::move(check)](const device::Status& status) {
        if (!status.ok()) return;  // the failure itself is reported instead
        const std::string message = check();
        auto state = shared.lock();
        if (message.empty() || !state) return;
        std::lock_guard lock(state->mutex);
        if (state->sticky_error.empty()) state->sticky_error = message;
      });
}

void Stream::poison(const std::string& message) {
  std::lock_guard lock(shared_->mutex);
  if (!shared_->sticky_error.empty()) return;
  shared_->sticky_error = message;
  shared_->sticky_attributed = true;
}

void Stream::synchronize(SyncType type) {
  switch (type) {
    case SyncType::none:
      return;
    case SyncType::commit:
    case SyncType::commit_and_continue:
      commit_open();
      if (type == SyncType::commit_and_continue) open_command_buffer();
      return;
    case SyncType::commit_adaptive:
      if (open_ && policy_.should_commit(open_commands_, open_bytes_)) commit_open();
      return;
    case SyncType::commit_and_wait: {
      wait_idle();
      start_encoding(nullptr);
      release_argument_buffers();  // bound arguments no longer hold their buffers
      std::string error;
      bool attributed;
      {
        std::lock_guard lock(shared_->mutex);
        error.swap(shared_->sticky_error);
        attributed = std::exchange(shared_->sticky_attributed, false);
      }
      if (error.empty()) return;
      if (attributed) throw AttributedError(error);
      fail(error);
      return;
    }
  }
  fail("unknown sync type ", static_cast<int32_t>(type));
}

StreamStats Stream::stats() const {
  StreamStats stats;
  stats.pending_commands = open_ ? open_commands_ : 0;
  stats.pending_bytes = open_ ? open_bytes_ : 0;
  stats.committed_buffers = shared_->committed.load();
  stats.completed_buffers = shared_->completed.load();
  return stats;
}

}  // namespace etm
