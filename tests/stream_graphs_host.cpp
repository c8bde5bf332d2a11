// Drives the runtime's Stream (native/runtime/stream.cpp) over a device that records what it is
// asked to do, to check that graph workloads share the kernels' commit policy and hazard
// tracking. Built by tests/test_stream_graphs.py from libetmetal's runtime objects; prints one
// line per broken expectation, then "done".
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/library.h"
#include "runtime/stream.h"
#include "runtime/write_order.h"

using namespace etm;
using namespace etm::device;

namespace {

std::vector<std::string> g_log;
int g_failures = 0;

void expect(bool condition, const std::string& what) {
  if (!condition) {
    std::printf("FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

std::string joined_log() {
  std::string text;
  for (const std::string& entry : g_log) text += (text.empty() ? "" : ", ") + entry;
  return text;
}

class RecordedBuffer final : public Buffer {
 public:
  explicit RecordedBuffer(size_t length) : bytes_(length) {}
  void* contents() override { return bytes_.data(); }
  size_t length() const override { return bytes_.size(); }

 private:
  std::vector<unsigned char> bytes_;
};

class RecordedPipeline final : public Pipeline {
 public:
  const std::string& name() const override { return name_; }
  uint32_t max_total_threads_per_threadgroup() const override { return 1024; }
  uint32_t thread_execution_width() const override { return 32; }
  size_t static_threadgroup_memory_length() const override { return 0; }

 private:
  std::string name_ = "kernel";
};

// One command buffer that is its own encoder; everything it is asked lands in g_log.
class RecordedCommandBuffer final : public CommandBuffer, public ComputeEncoder {
 public:
  ComputeEncoder& compute_encoder() override { return *this; }
  void copy_buffer(std::shared_ptr<Buffer>, size_t, std::shared_ptr<Buffer>, size_t, size_t) override {
    g_log.push_back("copy");
  }
  void fill_buffer(std::shared_ptr<Buffer>, size_t, size_t, uint8_t) override { g_log.push_back("fill"); }
  void add_completed_handler(std::function<void(const Status&)> handler) override {
    handlers_.push_back(std::move(handler));
  }
  void record_execution_times() override {}
  ExecutionTimes execution_times() const override { return {}; }
  void commit() override {
    g_log.push_back("commit");
    state_ = CommandBufferState::completed;
    for (auto& handler : handlers_) handler(Status());
  }
  void wait_until_completed() override {}
  CommandBufferState state() const override { return state_; }
  Status error() const override { return Status(); }
  Status encode_graph(const GraphWorkload& workload) override {
    if (workload.groups == 99) return Status::error("refused");
    g_log.push_back("graph");
    return Status();
  }
  void set_pipeline(std::shared_ptr<Pipeline>) override {}
  void set_buffer(std::shared_ptr<Buffer>, size_t, uint32_t) override {}
  void set_bytes(const void*, size_t, uint32_t) override {}
  void set_threadgroup_memory_length(size_t, uint32_t) override {}
  void dispatch_threads(Size3, Size3) override { g_log.push_back("dispatch"); }
  void dispatch_threadgroups(Size3, Size3) override { g_log.push_back("dispatch"); }
  void memory_barrier() override { g_log.push_back("barrier"); }

 private:
  std::vector<std::function<void(const Status&)>> handlers_;
  CommandBufferState state_ = CommandBufferState::recording;
};

class RecordedQueue final : public CommandQueue {
 public:
  std::shared_ptr<CommandBuffer> new_command_buffer() override { return std::make_shared<RecordedCommandBuffer>(); }
};

class RecordedDevice final : public Device {
 public:
  const std::string& name() const override { return name_; }
  const char* kind() const override { return "metal"; }
  std::string architecture() const override { return "recorded"; }
  size_t recommended_max_working_set_size() const override { return size_t{1} << 30; }
  bool runs_graphs() const override { return true; }
  Status new_buffer(size_t length, std::shared_ptr<Buffer>* out) override {
    *out = std::make_shared<RecordedBuffer>(length);
    return Status();
  }
  Status new_buffer_no_copy(void*, size_t, std::shared_ptr<Buffer>* out) override {
    out->reset();
    return Status();
  }
  Status new_library(const std::string&, std::shared_ptr<Library>*) override { return Status::error("no compiler"); }
  std::shared_ptr<CommandQueue> new_command_queue() override { return std::make_shared<RecordedQueue>(); }

 private:
  std::string name_ = "recorded";
};

GraphWorkload workload(const BufferPtr& input, const BufferPtr& output) {
  GraphWorkload w;
  GraphOperand a;
  a.buffer = input;
  a.sizes = {4, 4};
  a.strides = {4, 1};
  GraphOperand out = a;
  out.buffer = output;
  w.inputs = {a, a};
  w.output = out;
  return w;
}

}  // namespace

int main() {
  RecordedDevice device;
  WriteOrder order;
  CommitPolicy policy;
  policy.max_ops_per_buffer = 3;
  Stream stream(device, policy, order);
  auto x = std::make_shared<RecordedBuffer>(64);
  auto y = std::make_shared<RecordedBuffer>(64);
  KernelFunction kernel(nullptr, "kernel", std::make_shared<RecordedPipeline>());
  auto dispatch_on = [&](const BufferPtr& buffer) {
    stream.start_encoding(&kernel);
    stream.set_argument_buffer(&kernel, 0, buffer, 0);
    stream.dispatch(&kernel, Size3{16, 1, 1}, Size3{16, 1, 1});
  };

  // A graph is one command of the commit policy, like a dispatch.
  dispatch_on(x);
  stream.encode_graph(workload(x, y), "graph");
  expect(stream.stats().pending_commands == 2, "a kernel and a graph are two pending commands");
  dispatch_on(y);
  expect(joined_log() == "dispatch, graph, dispatch, commit",
         "the third command commits the buffer: " + joined_log());

  // The graph ends the compute encoder: a kernel after it on the same buffer needs no barrier,
  // while two kernels on one buffer inside one encoder do.
  g_log.clear();
  dispatch_on(x);
  dispatch_on(x);
  stream.encode_graph(workload(x, y), "graph");
  expect(joined_log() == "dispatch, barrier, dispatch, graph, commit", "barriers: " + joined_log());
  g_log.clear();
  dispatch_on(y);
  stream.encode_graph(workload(x, y), "graph");
  dispatch_on(y);
  expect(joined_log() == "dispatch, graph, dispatch, commit", "no barrier after a graph: " + joined_log());

  // A refused workload is an error naming the graph; nothing is counted.
  GraphWorkload refused = workload(x, y);
  refused.groups = 99;
  const int64_t pending = stream.stats().pending_commands;
  try {
    stream.encode_graph(refused, "mpsgraph_mm");
    expect(false, "a refused graph throws");
  } catch (const Error& error) {
    expect(std::string(error.what()).find("graph 'mpsgraph_mm': refused") != std::string::npos,
           std::string("message: ") + error.what());
  }
  expect(stream.stats().pending_commands == pending, "a refused graph is not a command");
  GraphWorkload missing = workload(x, nullptr);
  try {
    stream.encode_graph(missing, "mpsgraph_mm");
    expect(false, "a graph without an output buffer throws");
  } catch (const Error& error) {
    expect(std::string(error.what()).find("has no output buffer") != std::string::npos,
           std::string("message: ") + error.what());
  }
  stream.synchronize(SyncType::commit_and_wait);
  std::printf("done\n");
  return g_failures == 0 ? 0 : 1;
}
