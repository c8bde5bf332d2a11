// A stream records work into command buffers on one command queue (ExecuTorch's
// ETMetalStream). Each thread encodes into its own stream (Runtime::current_stream), so
// streams need no lock for encoding; only what completion handlers touch is synchronized.
//
// Sync types (etmetal_sync_type): NONE does nothing; COMMIT submits the open command buffer;
// COMMIT_AND_WAIT submits and waits for every submitted buffer, ends the current kernel
// encoding (releasing its bound buffers), then reports and clears the sticky error; COMMIT_AND_CONTINUE submits and opens the next buffer at once;
// COMMIT_ADAPTIVE submits only when the commit policy says the open buffer is full.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/device.h"
#include "runtime/allocator.h"
#include "runtime/buffer_uses.h"
#include "runtime/commit_policy.h"
#include "runtime/write_order.h"

namespace etm {

class KernelFunction;

enum class SyncType : int32_t {
  none = 0,
  commit = 1,
  commit_and_wait = 2,
  commit_and_continue = 3,
  commit_adaptive = 4,
};

struct StreamStats {
  int64_t pending_commands = 0;
  int64_t pending_bytes = 0;
  int64_t committed_buffers = 0;
  int64_t completed_buffers = 0;
};

class Stream {
 public:
  static constexpr unsigned kMaxArguments = 31;  // Metal's buffer argument table
  static constexpr size_t kMaxBytesArgument = 4096;  // Metal's setBytes limit
  static constexpr size_t kMaxThreadgroupMemory = 32768;

  // `order` is shared by every stream of the device (cross-thread ordering).
  Stream(device::Device& device, CommitPolicy policy, WriteOrder& order);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Kernel encoding (aoti_torch_mps_start_encoding / set_arg_* / dispatch_*).
  void start_encoding(KernelFunction* kernel);
  // `extent`: bytes from `offset` the kernel may reach (the tensor's allocation).
  void set_argument_buffer(KernelFunction* kernel, unsigned index, const BufferPtr& buffer,
                           size_t offset, size_t extent = SIZE_MAX);
  void set_argument_bytes(KernelFunction* kernel, unsigned index, const void* data,
                          size_t length);
  // Dynamic [[threadgroup(index)]] memory for the next dispatches of the kernel.
  void set_threadgroup_memory(KernelFunction* kernel, unsigned index, size_t length);
  // dispatchThreads: exactly `grid` threads, partial threadgroups at the edges.
  void dispatch(KernelFunction* kernel, device::Size3 grid, device::Size3 group);
  // dispatchThreadgroups: `groups` whole threadgroups of `group` threads.
  void dispatch_groups(KernelFunction* kernel, device::Size3 groups, device::Size3 group);

  void copy_buffer(BufferPtr source, size_t source_offset, BufferPtr destination,
                   size_t destination_offset, size_t length);
  void fill_buffer(BufferPtr destination, size_t offset, size_t length, uint8_t value);
  // A graph workload (device::Device::runs_graphs), ordered and committed like a dispatch:
  // one command of the commit policy, its operands' buffers tracked like kernel arguments.
  // `name` labels it in traces.
  void encode_graph(const device::GraphWorkload& workload, const std::string& name);

  // Applies a sync type; throws etm::Error carrying the sticky error on a wait that finds one.
  void synchronize(SyncType type);
  // Submits and waits for everything, leaving the sticky error in place (for host reads).
  void wait_idle();
  // Before the host touches `buffer`: waits for other streams' committed work on it (this
  // stream's own work needs wait_idle).
  void wait_for_other_streams(const BufferPtr& buffer);
  // Records an error that the next waiting synchronize reports (first error wins). The
  // message names the call that failed; synchronize reports it as an AttributedError.
  void poison(const std::string& message);
  // Runs `check` once the open command buffer completes; a non-empty result becomes the
  // sticky error. Call it before encoding the work it checks, so both share a buffer.
  void add_completion_check(std::function<std::string()> check);

  StreamStats stats() const;
  const CommitPolicy& policy() const { return policy_; }

 private:
  device::CommandBuffer& open_command_buffer();
  // Records a use of `buffer` in the open command buffer, waiting for other streams' work
  // on it at its first use there (and at its first write); returns its entry.
  BufferUses::Use& note_buffer_use(const device::Buffer* buffer, bool writing);
  // The first use (or first write) of a buffer in the open command buffer: counts its bytes
  // and waits for other streams' work on it.
  void order_first_use(BufferUses::Use& use, bool first_use, bool writing);
  void require_encoding(const KernelFunction* kernel) const;
  void release_argument_buffers();
  device::ArgumentBinding& argument_slot(KernelFunction* kernel, unsigned index);
  void encode_dispatch(KernelFunction* kernel, device::Size3 size, device::Size3 group,
                       bool whole_groups);
  void count_command();
  void commit_open();
  void wait_committed();
  // Trace (ETMETAL_TRACE): what each command of the open buffer is, for its completion.
  void trace_command(std::string category, std::string name, std::string args_json);
  void trace_completion();

  device::Device& device_;
  std::shared_ptr<device::CommandQueue> queue_;
  const CommitPolicy policy_;

  std::shared_ptr<device::CommandBuffer> open_;
  WriteOrder& write_order_;
  std::shared_ptr<StreamProgress> progress_;
  BufferUses uses_;  // device buffers bound in the open command buffer
  int64_t open_commands_ = 0;
  int64_t open_bytes_ = 0;
  std::shared_ptr<device::CommandBuffer> last_committed_;

  KernelFunction* encoding_kernel_ = nullptr;
  // The argument table of the kernel being encoded: kMaxArguments slots, the first
  // argument_count_ in use, bit i of set_arguments_ for each slot set since start_encoding.
  // By-value data lives in argument_bytes_ (which keep their capacity across dispatches).
  std::vector<device::ArgumentBinding> arguments_;
  std::vector<std::vector<unsigned char>> argument_bytes_;
  size_t argument_count_ = 0;
  uint32_t set_arguments_ = 0;
  // Slots that may still hold a buffer of an earlier encoding. A slot keeps its buffer until it
  // is set again (binding the same buffer again then costs no reference count), a dispatch uses
  // fewer slots or the stream is synchronized: no buffer is held past the next dispatch.
  size_t held_arguments_ = 0;
  std::vector<size_t> threadgroup_memory_;

  struct TracedCommand {
    std::string category;  // "dispatch", "copy", "fill" or "graph"
    std::string name;
    std::string args_json;
  };
  const bool tracing_;
  uint32_t trace_track_ = 0;  // the row of this stream's command buffers
  int64_t traced_buffers_ = 0;
  std::vector<TracedCommand> traced_;  // of the open buffer

  struct Shared {
    std::mutex mutex;
    std::string sticky_error;
    bool sticky_attributed = false;  // the message names its C function (see poison)
    std::atomic<int64_t> committed{0};
    std::atomic<int64_t> completed{0};
  };
  std::shared_ptr<Shared> shared_;
};

}  // namespace etm
