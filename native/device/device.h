// The device interface: the few objects of Metal's model that the runtime needs, so that
// the CPU device (software Metal) and the Metal device implement one contract.
//
// Lifetimes: objects are held by std::shared_ptr. Resources bound into a command buffer
// (buffers, pipelines) are retained by it until it completes, so the runtime may drop its
// own references right after encoding.
//
// Threading: Device and Library are thread-safe. A CommandBuffer and its encoder are
// recorded by one thread at a time; completion handlers run on a device thread.
// Errors: methods that can fail return a Status; none of them throws.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace etm::device {

class Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {
    if (message_.empty()) message_ = "unknown device error";
  }
  std::string message_;
};

// Memory visible to both the host and the device (Metal's shared storage mode).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* contents() = 0;
  virtual size_t length() const = 0;
};

struct Size3 {
  uint64_t x = 1, y = 1, z = 1;
  uint64_t volume() const { return x * y * z; }
};

// A compiled compute kernel, ready to dispatch (MTLComputePipelineState).
class Pipeline {
 public:
  virtual ~Pipeline() = default;
  virtual const std::string& name() const = 0;
  virtual uint32_t max_total_threads_per_threadgroup() const = 0;
  virtual uint32_t thread_execution_width() const = 0;
  virtual size_t static_threadgroup_memory_length() const = 0;
  // Whether the kernel may write the buffer bound at `index` (false for `constant` and
  // `const device` parameters). Orders work across streams; when unsure, true.
  virtual bool writes_buffer(uint32_t index) const {
    (void)index;
    return true;
  }
};

// A value for a function constant (`[[function_constant(n)]]`, MTLFunctionConstantValues):
// by name when `name` is not empty, else by index. The device converts it to the constant's
// declared type: bool takes `boolean`; integer types take `integer` in their range; float,
// half and bfloat take `integer` or `floating`.
struct FunctionConstantValue {
  enum class Kind { boolean, integer, floating };
  std::string name;
  uint32_t index = 0;
  Kind kind = Kind::integer;
  int64_t integer = 0;  // boolean (0 or 1) and integer
  double floating = 0;
};

// Compiled Metal Shading Language source (MTLLibrary).
class Library {
 public:
  virtual ~Library() = default;
  // Fails when the library has no kernel of that name.
  virtual Status new_pipeline(const std::string& kernel_name,
                              std::shared_ptr<Pipeline>* out) = 0;
  // The kernel specialised with function constant values (newFunctionWithName:
  // constantValues:); constants without a value are undefined. Fails on a constant the
  // library does not declare or a value its type cannot hold.
  virtual Status new_specialized_pipeline(const std::string& kernel_name,
                                          const std::vector<FunctionConstantValue>& constants,
                                          std::shared_ptr<Pipeline>* out) = 0;
};

// One slot of a dispatch's argument table (ComputeEncoder::dispatch): a buffer from `offset`
// on (its first `extent` bytes belong to what was bound, as set_buffer_extent says; SIZE_MAX:
// all), or `bytes_length` bytes at `bytes` (set_bytes), or nothing (nil) when both are empty.
struct ArgumentBinding {
  std::shared_ptr<Buffer> buffer;
  size_t offset = 0;
  size_t extent = SIZE_MAX;
  const void* bytes = nullptr;
  size_t bytes_length = 0;
};

// A whole dispatch: pipeline, argument table 0..argument_count-1, dynamic threadgroup memory
// lengths 0..threadgroup_length_count-1, and dispatch_threads(size, group), or
// dispatch_threadgroups(size, group) when `whole_groups`.
struct DispatchDescription {
  const std::shared_ptr<Pipeline>* pipeline = nullptr;
  const ArgumentBinding* arguments = nullptr;
  uint32_t argument_count = 0;
  const size_t* threadgroup_lengths = nullptr;
  uint32_t threadgroup_length_count = 0;
  Size3 size;
  Size3 group;
  bool whole_groups = false;
};

// Records compute work into its command buffer (MTLComputeCommandEncoder). Dispatches in
// one command buffer may overlap unless a memory_barrier() separates them; bindings persist
// across dispatches until changed.
class ComputeEncoder {
 public:
  virtual ~ComputeEncoder() = default;
  // Binds and dispatches in one call what the per-argument calls below would (the runtime's
  // path: a device records the table at once instead of slot by slot). Afterwards the
  // pipeline and bindings set by those calls are unspecified: set them again before
  // dispatch_threads or dispatch_threadgroups.
  virtual void dispatch(const DispatchDescription& work) {
    set_pipeline(*work.pipeline);
    for (uint32_t i = 0; i < work.argument_count; ++i) {
      const ArgumentBinding& argument = work.arguments[i];
      if (argument.bytes_length) {
        set_bytes(argument.bytes, argument.bytes_length, i);
        continue;
      }
      set_buffer(argument.buffer, argument.offset, i);
      if (argument.buffer && argument.extent != SIZE_MAX) set_buffer_extent(argument.extent, i);
    }
    for (uint32_t i = 0; i < work.threadgroup_length_count; ++i)
      set_threadgroup_memory_length(work.threadgroup_lengths[i], i);
    if (work.whole_groups)
      dispatch_threadgroups(work.size, work.group);
    else
      dispatch_threads(work.size, work.group);
  }
  virtual void set_pipeline(std::shared_ptr<Pipeline> pipeline) = 0;
  virtual void set_buffer(std::shared_ptr<Buffer> buffer, size_t offset, uint32_t index) = 0;
  // After set_buffer: the bytes from its offset on that belong to what was bound (a tensor's
  // allocation, often shorter than the pooled buffer). A device that checks kernel accesses
  // bounds them by it; the others ignore it.
  virtual void set_buffer_extent(size_t, uint32_t) {}
  // Copies `length` bytes now (setBytes); at most 4 KiB.
  virtual void set_bytes(const void* data, size_t length, uint32_t index) = 0;
  virtual void set_threadgroup_memory_length(size_t length, uint32_t index) = 0;
  // dispatchThreads: exactly `grid` threads; edge threadgroups are partial.
  virtual void dispatch_threads(Size3 grid, Size3 threads_per_group) = 0;
  // dispatchThreadgroups: `groups` whole threadgroups.
  virtual void dispatch_threadgroups(Size3 groups, Size3 threads_per_group) = 0;
  // Later dispatches observe every write of earlier ones.
  virtual void memory_barrier() = 0;
};

// Work a device runs through a graph compiler of its own (MPSGraph on Metal) instead of
// the runtime's kernels. Devices without one (Device::runs_graphs() false) refuse it.
enum class GraphDataType { float32, float16, bfloat16 };

// A tensor operand: `sizes` and `strides` in elements, the first element `offset` bytes
// into `buffer`. Graph devices take the layouts graph_layout() accepts.
struct GraphOperand {
  std::shared_ptr<Buffer> buffer;
  size_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  GraphDataType dtype = GraphDataType::float32;
};

enum class GraphLayout {
  row_major,         // dense, last dimension fastest
  last_two_swapped,  // a row-major tensor with its last two dimensions transposed
  other,
};

inline GraphLayout graph_layout(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  auto dense = [&](const std::vector<int64_t>& order) {
    int64_t expected = 1;
    for (size_t i = order.size(); i-- > 0;) {
      const size_t d = static_cast<size_t>(order[i]);
      if (sizes[d] != 1 && strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  };
  if (sizes.size() != strides.size()) return GraphLayout::other;
  std::vector<int64_t> order(sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  if (dense(order)) return GraphLayout::row_major;
  if (order.size() >= 2) {
    std::swap(order[order.size() - 1], order[order.size() - 2]);
    if (dense(order)) return GraphLayout::last_two_swapped;
  }
  return GraphLayout::other;
}

struct GraphWorkload {
  enum class Op {
    // out = alpha * (a @ b) + beta * addend. inputs: a [B, M, K] or [M, K], b [B, K, N] or
    // [K, N] (row-major or last two swapped), then the addend when beta != 0: row-major, of
    // out's rank, each size out's or 1 (broadcast). out row-major.
    matmul,
    // out = conv2d(input, weight) + bias. inputs: input [N, C, H, W], weight
    // [O, C / groups, kH, kW], then bias [O] when there is one; all row-major, out too.
    convolution2d,
  };
  Op op = Op::matmul;
  std::vector<GraphOperand> inputs;
  GraphOperand output;
  double alpha = 1;
  double beta = 0;
  int64_t stride[2] = {1, 1};    // (y, x)
  int64_t padding[2] = {0, 0};   // (y, x), both sides
  int64_t dilation[2] = {1, 1};  // (y, x)
  int64_t groups = 1;
};

enum class CommandBufferState { recording, committed, completed, failed };

// The host's steady clock in microseconds: the time base of execution times. (On macOS it
// counts mach_absolute_time, the base of Metal's GPUStartTime / GPUEndTime.)
inline double host_clock_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// When a command buffer ran, on host_clock_us, for traces. `commands` holds one interval per
// recorded command (dispatch, copy, fill) in recording order where the device times each;
// it is empty where only the whole buffer is timed (Metal's GPU timestamps).
struct ExecutionTimes {
  struct Interval {
    double start_us = 0;
    double end_us = 0;
  };
  Interval buffer;
  std::vector<Interval> commands;
};

// An ordered batch of work (MTLCommandBuffer). Command buffers of one queue execute in
// commit order.
class CommandBuffer {
 public:
  virtual ~CommandBuffer() = default;
  // The command buffer's one reusable compute encoder; a blit ends it and the next call
  // begins a new one.
  virtual ComputeEncoder& compute_encoder() = 0;
  virtual void copy_buffer(std::shared_ptr<Buffer> source, size_t source_offset,
                           std::shared_ptr<Buffer> destination, size_t destination_offset,
                           size_t length) = 0;
  virtual void fill_buffer(std::shared_ptr<Buffer> destination, size_t offset, size_t length,
                           uint8_t value) = 0;
  // Runs after execution, on a device thread, with the outcome. Add before commit().
  virtual void add_completed_handler(std::function<void(const Status&)> handler) = 0;
  // Asks the device to time the execution (call before commit; costs a little per command).
  virtual void record_execution_times() = 0;
  // The execution times; complete inside completed handlers and after completion. All zero
  // when not recorded or when the device could not time the work.
  virtual ExecutionTimes execution_times() const = 0;
  virtual void commit() = 0;
  virtual void wait_until_completed() = 0;
  virtual CommandBufferState state() const = 0;
  // The failure of a failed command buffer, naming its cause; ok otherwise.
  virtual Status error() const = 0;
  // Encodes a graph workload after the work recorded so far, in encoders of its own (a
  // compute encoder open before it is ended). Fails at once on a device that runs no graphs
  // or a workload it cannot take; other failures fail the command buffer.
  virtual Status encode_graph(const GraphWorkload& workload) {
    (void)workload;
    return Status::error("this device runs no graphs");
  }
};

class CommandQueue {
 public:
  virtual ~CommandQueue() = default;
  virtual std::shared_ptr<CommandBuffer> new_command_buffer() = 0;
};

// What one dispatch did, measured by devices that can count (the CPU device with
// ETMETAL_COUNTERS=1): bytes loaded from and stored to buffers bound with set_buffer
// (set_bytes data and threadgroup memory are not device memory), threads and threadgroups.
struct DispatchCounters {
  std::string kernel;
  uint64_t threads = 0;
  uint64_t threadgroups = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const std::string& name() const = 0;
  // "cpu" or "metal".
  virtual const char* kind() const = 0;
  // GPU family for commit-policy defaults, e.g. "applegpu_g13s"; "cpu" for the CPU device.
  virtual std::string architecture() const = 0;
  virtual size_t recommended_max_working_set_size() const = 0;
  // Whether CommandBuffer::encode_graph works (MPSGraph on Metal; never on the CPU device).
  virtual bool runs_graphs() const { return false; }

  virtual Status new_buffer(size_t length, std::shared_ptr<Buffer>* out) = 0;
  // Wraps memory the caller owns and keeps alive. Returns ok with a null buffer when the
  // device cannot use that memory in place (Metal requires page alignment).
  virtual Status new_buffer_no_copy(void* pointer, size_t length,
                                    std::shared_ptr<Buffer>* out) = 0;
  // Compiles MSL source. The error names the failing source lines.
  virtual Status new_library(const std::string& source, std::shared_ptr<Library>* out) = 0;
  virtual std::shared_ptr<CommandQueue> new_command_queue() = 0;

  // Traffic counters: between begin_counters and end_counters, every dispatch this device
  // executes (from any queue) is recorded, in execution order; end_counters returns them.
  // Devices that cannot count fail with a message saying why.
  virtual Status begin_counters() { return Status::error("the " + std::string(kind()) + " device has no traffic counters"); }
  virtual Status end_counters(std::vector<DispatchCounters>* out) {
    out->clear();
    return Status::error("the " + std::string(kind()) + " device has no traffic counters");
  }
};

// The device kinds this build has, in preference order.
std::vector<std::string> available_device_kinds();
// Creates the device of the given kind ("cpu", "metal").
Status create_device(const std::string& kind, std::unique_ptr<Device>* out);

}  // namespace etm::device
