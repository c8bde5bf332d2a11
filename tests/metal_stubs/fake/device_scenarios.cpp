// Runs the Metal device (native/device/metal/metal_device.mm) against the fake Metal of
// fake_metal.mm: `device_scenarios <scenario>` exercises one part of the device through the
// device interface and prints one line per broken expectation, then "done". The scenarios
// are driven by tests/test_metal_syntax.py.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "device/device.h"
#include "device/metal/metal_device.h"
#include "fake_metal.h"

using namespace etm::device;

namespace {

int g_failures = 0;

void expect(bool condition, const std::string& what) {
  if (!condition) {
    std::printf("FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

void expect_equal(const std::string& actual, const std::string& expected, const std::string& what) {
  expect(actual == expected, what + ": got '" + actual + "', expected '" + expected + "'");
}

void expect_contains(const std::string& text, const std::string& part, const std::string& what) {
  expect(text.find(part) != std::string::npos, what + ": '" + text + "' lacks '" + part + "'");
}

bool log_has(const std::string& entry) {
  for (const std::string& line : fake_metal::command_log())
    if (line == entry) return true;
  return false;
}

void expect_no_violations(const std::string& what) {
  for (const std::string& violation : fake_metal::violations())
    expect(false, what + ": Metal validation would fail: " + violation);
}

std::unique_ptr<Device> make_device() {
  std::unique_ptr<Device> device;
  Status status = metal::create_metal_device(&device);
  expect(status.ok(), "create_metal_device: " + status.message());
  if (!device) std::exit(1);
  return device;
}

const char* kKernels = R"(
kernel void add_one(device float* data [[buffer(0)]], constant float& addend [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) { data[i] += addend; }
kernel void fault(device float* data [[buffer(0)]]) {}
kernel void slow(device float* data [[buffer(0)]]) {}
)";

std::shared_ptr<Pipeline> pipeline(Device& device, const std::string& name) {
  std::shared_ptr<Library> library;
  Status status = device.new_library(kKernels, &library);
  expect(status.ok(), "new_library: " + status.message());
  std::shared_ptr<Pipeline> result;
  status = library->new_pipeline(name, &result);
  expect(status.ok(), "new_pipeline " + name + ": " + status.message());
  return result;
}

std::shared_ptr<Buffer> buffer(Device& device, size_t length) {
  std::shared_ptr<Buffer> result;
  Status status = device.new_buffer(length, &result);
  expect(status.ok(), "new_buffer: " + status.message());
  return result;
}

// Encodes with `record`, commits, waits; returns the outcome the completion handler saw.
Status run(CommandQueue& queue, const std::function<void(CommandBuffer&)>& record) {
  auto command_buffer = queue.new_command_buffer();
  record(*command_buffer);
  auto seen = std::make_shared<std::vector<Status>>();
  command_buffer->add_completed_handler([seen](const Status& status) { seen->push_back(status); });
  command_buffer->commit();
  command_buffer->wait_until_completed();
  expect(seen->size() == 1, "the completed handler ran once before wait_until_completed returned");
  const Status outcome = seen->empty() ? Status::error("no handler") : seen->front();
  expect_equal(command_buffer->error().message(), outcome.message(), "error() matches the handler");
  expect(command_buffer->state() ==
             (outcome.ok() ? CommandBufferState::completed : CommandBufferState::failed),
         "state after completion");
  return outcome;
}

void device_properties() {
  auto device = make_device();
  expect_equal(device->name(), "Fake Apple M1 Max", "name");
  expect_equal(device->kind(), "metal", "kind");
  expect_equal(device->architecture(), "applegpu_g13s", "architecture");
  expect(device->recommended_max_working_set_size() == (size_t{1} << 20), "working set");
  auto queue = device->new_command_queue();
  auto resident = buffer(*device, 100);
  expect(fake_metal::queues_with_residency() == 0 && fake_metal::residency_allocations() == 0,
         "no residency set unless ETMETAL_RESIDENT_MB asks for one");
}

// Run with ETMETAL_RESIDENT_MB=1: the set fills the fake's 1 MiB working set.
void residency() {
  auto device = make_device();
  expect(fake_metal::queues_with_residency() == 0, "no queue yet");
  auto queue = device->new_command_queue();
  expect(fake_metal::queues_with_residency() == 1, "the residency set is attached to the queue");
  {
    auto small = buffer(*device, 100);
    auto empty = buffer(*device, 0);
    expect(fake_metal::residency_allocations() == 2, "both joined the residency set");
    expect(fake_metal::residency_requests() == 2, "residency requested after each commit");
    // Allocations are whole pages; the set holds up to the 1 MiB working set.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t fitting = 2 + ((size_t{1} << 20) - 2 * page) / 16384;
    std::vector<std::shared_ptr<Buffer>> many;
    for (int i = 0; i < 70; ++i) many.push_back(buffer(*device, 16384));
    expect(fake_metal::residency_allocations() == fitting, "the set stops at its capacity");
    many.clear();
    expect(fake_metal::residency_allocations() == 2, "freed buffers leave the set");
    // Caller memory wrapped without a copy is the caller's to page: it never joins.
    void* memory = nullptr;
    expect(posix_memalign(&memory, 16384, 16384) == 0, "posix_memalign");
    std::shared_ptr<Buffer> wrapped;
    Status status = device->new_buffer_no_copy(memory, 16384, &wrapped);
    expect(status.ok() && wrapped, "no-copy buffer: " + status.message());
    expect(fake_metal::residency_allocations() == 2, "no-copy memory stays out of the set");
    wrapped.reset();
    std::free(memory);
  }
  expect(fake_metal::residency_allocations() == 0, "all buffers left the set");
  expect_no_violations("residency");
}

void buffers() {
  auto device = make_device();
  const size_t live = fake_metal::live_buffers();
  {
    auto small = buffer(*device, 100);
    expect(small->length() == 100, "length is the requested length");
    auto* bytes = static_cast<unsigned char*>(small->contents());
    expect(bytes != nullptr, "contents");
    bool zero = true;
    for (int i = 0; i < 100; ++i) zero = zero && bytes[i] == 0;
    expect(zero, "new buffers are zeroed");
    auto empty = buffer(*device, 0);
    expect(empty && empty->length() == 0 && empty->contents() != nullptr, "zero-length buffer");
    std::shared_ptr<Buffer> huge;
    Status status = device->new_buffer(size_t{1} << 25, &huge);
    expect(!status.ok() && !huge, "a buffer over maxBufferLength fails");
    expect_contains(status.message(), "largest buffer is 16777216 bytes", "huge buffer message");
    status = device->new_buffer(SIZE_MAX, &huge);
    expect(!status.ok(), "SIZE_MAX fails instead of overflowing");
  }
  expect(fake_metal::live_buffers() == live, "all Metal buffers were released");
  expect_no_violations("buffers");
}

void no_copy() {
  auto device = make_device();
  void* memory = std::aligned_alloc(16384, 4 * 16384);
  std::shared_ptr<Buffer> wrapped;
  Status status = device->new_buffer_no_copy(memory, 2 * 16384, &wrapped);
  expect(status.ok() && wrapped, "page-aligned memory is wrapped");
  expect(wrapped && wrapped->contents() == memory && wrapped->length() == 2 * 16384,
         "wrapped in place");
  for (auto [offset, length] : {std::pair<size_t, size_t>{64, 16384}, {0, 100}, {0, 0}}) {
    std::shared_ptr<Buffer> other = wrapped;
    status = device->new_buffer_no_copy(static_cast<char*>(memory) + offset, length, &other);
    expect(status.ok() && !other, "unaligned memory gives ok and no buffer");
  }
  wrapped.reset();
  std::free(memory);
  expect_no_violations("no_copy");
}

void compile_options() {
  auto device = make_device();
  pipeline(*device, "add_one");
  const fake_metal::CompileRecord record = fake_metal::last_compile();
  // The fake is built with the macOS 26 SDK's declarations, and @available is true off Apple.
  expect(record.language_version == (4u << 16), "MSL 4.0");
  const bool fast = std::getenv("ETMETAL_FAST_MATH") != nullptr;
  expect(record.math_mode_set, "mathMode is set (macOS 15 API)");
  expect(record.math_mode == (fast ? 2 : 0), "mathMode Safe, or Fast with ETMETAL_FAST_MATH=1");
  expect(record.floating_point_functions == (fast ? 0 : 1),
         "precise functions, or fast with ETMETAL_FAST_MATH=1");
}

void libraries() {
  auto device = make_device();
  std::shared_ptr<Library> library;
  Status status = device->new_library("kernel void broken() {}\n#error oops\n", &library);
  expect(!status.ok() && !library, "a compile error fails");
  expect_contains(status.message(), "Metal shader compilation failed",
                  "compile error names the failure");
  expect_contains(status.message(), "program_source:2:2: error: fake failure",
                  "compile error carries Metal's message");
  status = device->new_library(std::string("kernel void a() {} \xff\xfe"), &library);
  expect_equal(status.message(), "MSL source is not valid UTF-8", "invalid UTF-8");
  status = device->new_library(std::string(kKernels) + "void helper() {}", &library);
  expect(status.ok(), "library compiles");
  std::shared_ptr<Pipeline> result;
  status = library->new_pipeline("missing", &result);
  expect_equal(status.message(),
               "the Metal library has no function named 'missing' (it has: add_one, fault, "
               "slow, helper)",
               "missing kernel");
  status = library->new_pipeline("helper", &result);
  expect_equal(status.message(), "'helper' is not a kernel function", "non-kernel function");
  status = library->new_pipeline("add_one", &result);
  expect(status.ok() && result, "pipeline");
  expect_equal(result->name(), "add_one", "pipeline name");
  expect(result->max_total_threads_per_threadgroup() == 1024, "max threads");
  expect(result->thread_execution_width() == 32, "execution width");
  expect(result->static_threadgroup_memory_length() == 64, "static threadgroup memory");
}

// Values are converted to each constant's declared type and set by its index
// (MTLFunctionConstantValues); the fake logs "<index>=<MTLDataType>:<little-endian bytes>".
void function_constants() {
  auto device = make_device();
  std::shared_ptr<Library> library;
  Status status = device->new_library(R"(
constant float scale [[function_constant(0)]];
constant bool flag [[function_constant(1)]];
constant half bias [[function_constant(2)]];
kernel void scaled(device float* data [[buffer(0)]]) {}
)",
                                      &library);
  expect(status.ok(), "new_library: " + status.message());
  using Kind = FunctionConstantValue::Kind;
  auto value = [](std::string name, uint32_t index, Kind kind, int64_t integer, double floating) {
    FunctionConstantValue v;
    v.name = std::move(name);
    v.index = index;
    v.kind = kind;
    v.integer = integer;
    v.floating = floating;
    return v;
  };
  fake_metal::clear_logs();
  std::shared_ptr<Pipeline> result;
  status = library->new_specialized_pipeline(
      "scaled",
      {value("scale", 0, Kind::floating, 0, 2.5), value("", 1, Kind::boolean, 1, 0),
       value("bias", 0, Kind::integer, 3, 0)},
      &result);
  expect(status.ok() && result, "specialized pipeline: " + status.message());
  expect(log_has("specialize scaled 0=3:00002040 1=53:01 2=16:0042"),
         "constants converted to float, bool and half by name and by index");

  status = library->new_specialized_pipeline("scaled", {value("nope", 0, Kind::integer, 1, 0)},
                                             &result);
  expect_contains(status.message(), "the function declares no function constant 'nope'",
                  "an undeclared name");
  status = library->new_specialized_pipeline("scaled", {value("", 7, Kind::integer, 1, 0)},
                                             &result);
  expect_contains(status.message(), "the function declares no function constant 7",
                  "an undeclared index");
  status = library->new_specialized_pipeline("scaled", {value("flag", 0, Kind::floating, 0, 0.5)},
                                             &result);
  expect_contains(status.message(), "function constant 'flag'", "a value bool cannot hold");
  status = library->new_specialized_pipeline("scaled", {value("scale", 0, Kind::floating, 0, 1)},
                                             &result);
  expect_contains(status.message(), "function constant 'flag' has no value",
                  "Metal's error for a constant left unset");
  expect_no_violations("function_constants");
}

void dispatches() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  auto add_one = pipeline(*device, "add_one");
  auto data = buffer(*device, 64);
  auto* values = static_cast<float*>(data->contents());
  for (int i = 0; i < 16; ++i) values[i] = static_cast<float>(i);
  fake_metal::clear_logs();
  Status outcome = run(*queue, [&](CommandBuffer& command_buffer) {
    ComputeEncoder& encoder = command_buffer.compute_encoder();
    const float addend = 1.5f;
    encoder.set_pipeline(add_one);
    encoder.set_buffer(data, 16, 0);  // elements 4..11
    encoder.set_bytes(&addend, sizeof(addend), 1);
    encoder.set_threadgroup_memory_length(20, 0);
    encoder.dispatch_threads(Size3{8, 1, 1}, Size3{4, 1, 1});
    encoder.memory_barrier();
    encoder.dispatch_threadgroups(Size3{2, 1, 1}, Size3{4, 1, 1});
    encoder.dispatch_threads(Size3{0, 1, 1}, Size3{4, 1, 1});  // empty: skipped
  });
  expect(outcome.ok(), "dispatches complete: " + outcome.message());
  for (int i = 0; i < 16; ++i) {
    const float expected = static_cast<float>(i) + ((i >= 4 && i < 12) ? 3.0f : 0.0f);
    expect(values[i] == expected, "element " + std::to_string(i));
  }
  for (const char* entry :
       {"compute concurrent", "pipeline add_one", "buffer 0 +16", "bytes 1 4", "threadgroup 0 32",
        "dispatch_threads 8x1x1 4x1x1", "barrier", "dispatch_threadgroups 8x1x1 4x1x1", "end",
        "commit"}) {
    expect(log_has(entry), std::string("encoded: ") + entry);
  }
  expect(!log_has("dispatch_threads 0x1x1 4x1x1"), "an empty grid is not dispatched");
  expect_no_violations("dispatches");
}

void blits() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  auto source = buffer(*device, 64);
  auto destination = buffer(*device, 64);
  auto* from = static_cast<unsigned char*>(source->contents());
  auto* to = static_cast<unsigned char*>(destination->contents());
  for (int i = 0; i < 64; ++i) from[i] = static_cast<unsigned char>(i + 1);
  fake_metal::clear_logs();
  Status outcome = run(*queue, [&](CommandBuffer& command_buffer) {
    command_buffer.copy_buffer(source, 4, destination, 8, 16);   // blit
    command_buffer.copy_buffer(source, 1, destination, 33, 5);   // unaligned: kernel
    command_buffer.fill_buffer(destination, 40, 8, 0xAB);        // blit
    command_buffer.fill_buffer(destination, 49, 3, 0xCD);        // unaligned: kernel
    command_buffer.copy_buffer(source, 0, destination, 0, 0);    // empty: nothing
  });
  expect(outcome.ok(), "copies complete: " + outcome.message());
  std::vector<unsigned char> expected(64, 0);
  for (int i = 0; i < 16; ++i) expected[8 + i] = from[4 + i];
  for (int i = 0; i < 5; ++i) expected[33 + i] = from[1 + i];
  for (int i = 40; i < 48; ++i) expected[i] = 0xAB;
  for (int i = 49; i < 52; ++i) expected[i] = 0xCD;
  for (int i = 0; i < 64; ++i) expect(to[i] == expected[i], "byte " + std::to_string(i));
  for (const char* entry : {"blit", "copy 4->8 16", "compute serial", "pipeline etm_copy_bytes",
                            "fill 40 8 171", "pipeline etm_fill_bytes"}) {
    expect(log_has(entry), std::string("encoded: ") + entry);
  }
  // A blit ends the compute encoder: a dispatch after it needs its pipeline again.
  auto add_one = pipeline(*device, "add_one");
  outcome = run(*queue, [&](CommandBuffer& command_buffer) {
    ComputeEncoder& encoder = command_buffer.compute_encoder();
    encoder.set_pipeline(add_one);
    command_buffer.fill_buffer(destination, 0, 4, 0);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
  });
  expect_equal(outcome.message(),
               "Metal encoding error: dispatch without a pipeline set in this compute encoder",
               "dispatch after a blit without rebinding");
  expect_no_violations("blits");
}

void encoding_errors() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  auto add_one = pipeline(*device, "add_one");
  auto data = buffer(*device, 64);
  const std::vector<char> big(5000, 0);
  std::shared_ptr<Buffer> null_buffer;
  const std::map<std::string, std::function<void(CommandBuffer&)>> cases = {
      {"set_bytes: needs 1 to 4096 bytes of data, got 5000",
       [&](CommandBuffer& cb) { cb.compute_encoder().set_bytes(big.data(), big.size(), 0); }},
      {"set_buffer: index 31 is outside Metal's argument table (0 to 30)",
       [&](CommandBuffer& cb) { cb.compute_encoder().set_buffer(data, 0, 31); }},
      {"set_buffer: offset 65 is past the end of a 64-byte buffer",
       [&](CommandBuffer& cb) { cb.compute_encoder().set_buffer(data, 65, 0); }},
      {"dispatch: threadgroup size 64x32x1 exceeds the pipeline's maximum of 1024 threads",
       [&](CommandBuffer& cb) {
         cb.compute_encoder().set_pipeline(add_one);
         cb.compute_encoder().dispatch_threads(Size3{64, 32, 1}, Size3{64, 32, 1});
       }},
      {"set_threadgroup_memory_length: 40000 bytes exceed the device's 32768 bytes of "
       "threadgroup memory",
       [&](CommandBuffer& cb) { cb.compute_encoder().set_threadgroup_memory_length(40000, 0); }},
      {"dispatch: 32832 bytes of threadgroup memory (static and set) exceed the device's 32768",
       [&](CommandBuffer& cb) {
         // add_one has 64 bytes of static threadgroup memory; lengths count from set_pipeline.
         cb.compute_encoder().set_pipeline(add_one);
         cb.compute_encoder().set_threadgroup_memory_length(16384, 0);
         cb.compute_encoder().set_threadgroup_memory_length(16384, 2);
         cb.compute_encoder().set_threadgroup_memory_length(4000, 1);
         cb.compute_encoder().set_threadgroup_memory_length(16384, 1);
         cb.compute_encoder().set_threadgroup_memory_length(16384, 2);
         cb.compute_encoder().set_threadgroup_memory_length(0, 0);
         cb.compute_encoder().dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
       }},
      {"copy_buffer: range outside its buffers",
       [&](CommandBuffer& cb) { cb.copy_buffer(data, 60, data, 0, 8); }},
      {"fill_buffer: range outside its buffer",
       [&](CommandBuffer& cb) { cb.fill_buffer(data, 0, 65, 1); }},
  };
  for (const auto& entry : cases) {
    const std::string& message = entry.first;
    const auto& record = entry.second;
    Status outcome = run(*queue, [&](CommandBuffer& command_buffer) {
      record(command_buffer);
      // Later work is not encoded; the first error is what the buffer reports.
      command_buffer.compute_encoder().set_bytes(big.data(), big.size(), 1);
    });
    expect_equal(outcome.message(), "Metal encoding error: " + message, "encoding error");
  }

  const float addend = 1.0f;
  // An empty tensor binds a null buffer: legal (setBuffer:nil), the dispatch runs.
  Status outcome = run(*queue, [&](CommandBuffer& cb) {
    ComputeEncoder& encoder = cb.compute_encoder();
    encoder.set_pipeline(add_one);
    encoder.set_buffer(data, 0, 0);
    encoder.set_bytes(&addend, sizeof(addend), 1);
    encoder.set_buffer(null_buffer, 0, 2);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
  });
  expect(outcome.ok(), "a null binding is legal: " + outcome.message());
  expect(log_has("buffer 2 nil"), "null buffer bound as nil");

  // After a skipped binding nothing more is encoded: the dispatch would read the previous
  // kernel's binding.
  fake_metal::clear_logs();
  outcome = run(*queue, [&](CommandBuffer& cb) {
    ComputeEncoder& encoder = cb.compute_encoder();
    encoder.set_pipeline(add_one);
    encoder.set_buffer(data, 0, 0);
    encoder.set_bytes(&addend, sizeof(addend), 1);
    encoder.set_buffer(data, 65, 0);  // skipped: past the end
    encoder.dispatch_threads(Size3{2, 1, 1}, Size3{2, 1, 1});
    cb.fill_buffer(data, 0, 4, 0);
  });
  expect_contains(outcome.message(), "set_buffer: offset 65", "the skipped binding is reported");
  expect(!log_has("dispatch_threads 2x1x1 2x1x1"), "no dispatch after a recorded error");
  expect(!log_has("fill 0 4 0"), "no blit after a recorded error");

  // Threadgroup memory an earlier kernel set on the encoder does not count for the next one.
  outcome = run(*queue, [&](CommandBuffer& cb) {
    ComputeEncoder& encoder = cb.compute_encoder();
    encoder.set_pipeline(add_one);
    encoder.set_buffer(data, 0, 0);
    encoder.set_bytes(&addend, sizeof(addend), 1);
    encoder.set_threadgroup_memory_length(32000, 0);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
    encoder.set_pipeline(add_one);
    encoder.set_threadgroup_memory_length(16384, 1);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
  });
  expect(outcome.ok(), "threadgroup memory counts per pipeline: " + outcome.message());
  expect_no_violations("encoding_errors");
}

void gpu_failure() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  auto fault = pipeline(*device, "fault");
  auto data = buffer(*device, 64);
  Status outcome = run(*queue, [&](CommandBuffer& command_buffer) {
    ComputeEncoder& encoder = command_buffer.compute_encoder();
    encoder.set_pipeline(fault);
    encoder.set_buffer(data, 0, 0);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
  });
  expect_contains(outcome.message(),
                  "Metal command buffer failed: page fault (MTLCommandBufferErrorPageFault): ",
                  "GPU failure is named");
  expect_contains(outcome.message(), "Metal says: Discarded (victim of GPU error/recovery)",
                  "GPU failure keeps Metal's description");
  expect_no_violations("gpu_failure");
}

void lifetimes() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  const size_t live = fake_metal::live_buffers();
  auto command_buffer = queue->new_command_buffer();
  {
    // The caller drops buffers, pipeline and queue right after encoding (device.h allows it).
    auto slow = pipeline(*device, "slow");
    auto data = buffer(*device, 64);
    auto source = buffer(*device, 64);
    ComputeEncoder& encoder = command_buffer->compute_encoder();
    encoder.set_pipeline(slow);
    encoder.set_buffer(data, 0, 0);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
    command_buffer->copy_buffer(source, 0, data, 0, 64);
    command_buffer->copy_buffer(source, 1, data, 3, 7);
  }
  queue.reset();
  command_buffer->commit();
  expect(fake_metal::live_buffers() > live, "buffers stay alive while the GPU runs");
  command_buffer->wait_until_completed();
  expect(command_buffer->state() == CommandBufferState::completed, "completed");
  expect(fake_metal::live_buffers() == live, "buffers are released once the GPU is done");
  command_buffer.reset();
  expect_no_violations("lifetimes");
}

void completion() {
  auto device = make_device();
  auto queue = device->new_command_queue();
  auto slow = pipeline(*device, "slow");
  auto data = buffer(*device, 64);
  // Waiting on a command buffer that was never committed returns at once.
  auto idle = queue->new_command_buffer();
  idle->wait_until_completed();
  expect(idle->state() == CommandBufferState::recording, "uncommitted stays recording");
  // Dropping a command buffer with an open encoder must end the encoder (Metal asserts).
  {
    auto abandoned = queue->new_command_buffer();
    abandoned->compute_encoder().set_pipeline(slow);
  }
  auto first = queue->new_command_buffer();
  auto second = queue->new_command_buffer();
  std::atomic<int> order{0};
  int first_seen = -1, second_seen = -1;
  for (auto* command_buffer : {first.get(), second.get()}) {
    ComputeEncoder& encoder = command_buffer->compute_encoder();
    encoder.set_pipeline(slow);
    encoder.set_buffer(data, 0, 0);
    encoder.dispatch_threads(Size3{1, 1, 1}, Size3{1, 1, 1});
  }
  first->add_completed_handler([&](const Status&) { first_seen = order++; });
  second->add_completed_handler([&](const Status&) { second_seen = order++; });
  first->commit();
  second->commit();
  second->commit();  // a second commit is ignored
  expect(first->state() == CommandBufferState::committed ||
             first->state() == CommandBufferState::completed,
         "committed");
  second->wait_until_completed();
  expect(first_seen == 0 && second_seen == 1, "command buffers complete in commit order");
  bool late = false;
  second->add_completed_handler([&](const Status& status) { late = status.ok(); });
  expect(late, "a handler added after completion runs at once with the outcome");
  first->wait_until_completed();
  expect_no_violations("completion");
}

// ---------------------------------------------------------------------------------------
// Graph workloads (MPSGraph): results against float64 loops over the operands' own strides,
// the graph cache, and order with kernels in one command buffer.

uint16_t half_bits(float value) {
  // Exact for the values used here (multiples of 1/8 below 16).
  if (value == 0) return 0;
  const uint16_t sign = value < 0 ? 0x8000 : 0;
  float magnitude = value < 0 ? -value : value;
  int exponent = 0;
  while (magnitude >= 2) magnitude /= 2, ++exponent;
  while (magnitude < 1) magnitude *= 2, --exponent;
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | static_cast<uint16_t>((magnitude - 1) * 1024));
}

float from_half_bits(uint16_t bits) {
  if ((bits & 0x7fff) == 0) return 0;
  const float magnitude = (1 + (bits & 0x3ff) / 1024.0f) * std::ldexp(1.0f, ((bits >> 10) & 0x1f) - 15);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// An operand over a fresh buffer: `sizes`/`strides` at `offset` bytes, elements k/8 - 1 for
// deterministic small k (exact in every dtype), written where the strides put them.
int64_t reach(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
  return last + 1;
}

size_t element_size(GraphDataType dtype) { return dtype == GraphDataType::float32 ? 4 : 2; }

GraphOperand make_operand(Device& device, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                          size_t offset, GraphDataType dtype, int seed) {
  GraphOperand operand;
  operand.sizes = std::move(sizes);
  operand.strides = std::move(strides);
  operand.offset = offset;
  operand.dtype = dtype;
  const int64_t elements = reach(operand.sizes, operand.strides);
  operand.buffer = buffer(device, offset + static_cast<size_t>(elements) * element_size(dtype));
  char* base = static_cast<char*>(operand.buffer->contents()) + offset;
  for (int64_t i = 0; i < elements; ++i) {
    const float value = static_cast<float>((i * 7 + seed * 3) % 17) / 8.0f - 1.0f;
    if (dtype == GraphDataType::float32) {
      std::memcpy(base + 4 * i, &value, 4);
    } else if (dtype == GraphDataType::float16) {
      const uint16_t bits = half_bits(value);
      std::memcpy(base + 2 * i, &bits, 2);
    } else {
      uint32_t wide;
      std::memcpy(&wide, &value, 4);
      const uint16_t bits = static_cast<uint16_t>(wide >> 16);  // exact: few mantissa bits
      std::memcpy(base + 2 * i, &bits, 2);
    }
  }
  return operand;
}

// The element at logical index `index` (row-major over sizes), read through the strides.
double element(const GraphOperand& operand, const std::vector<int64_t>& index) {
  int64_t position = 0;
  for (size_t d = 0; d < index.size(); ++d) position += index[d] * operand.strides[d];
  const char* address = static_cast<const char*>(operand.buffer->contents()) + operand.offset +
                        static_cast<size_t>(position) * element_size(operand.dtype);
  if (operand.dtype == GraphDataType::float32) {
    float value;
    std::memcpy(&value, address, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, address, 2);
  if (operand.dtype == GraphDataType::float16) return from_half_bits(bits);
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

std::vector<int64_t> row_major(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return strides;
}

GraphOperand make_output(Device& device, std::vector<int64_t> sizes, GraphDataType dtype) {
  std::vector<int64_t> strides = row_major(sizes);
  GraphOperand out = make_operand(device, std::move(sizes), std::move(strides), 0, dtype, 99);
  return out;
}

// out = alpha * a @ b + beta * addend, in float64 over the operands' strides.
void expect_matmul(const GraphWorkload& w, double tolerance, const std::string& what) {
  const GraphOperand& a = w.inputs[0];
  const GraphOperand& b = w.inputs[1];
  const size_t rank = a.sizes.size();
  const int64_t batches = rank == 3 ? a.sizes[0] : 1;
  const int64_t M = a.sizes[rank - 2], K = a.sizes[rank - 1], N = b.sizes[rank - 1];
  double worst = 0;
  for (int64_t batch = 0; batch < batches; ++batch)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        auto index = [&](int64_t row, int64_t column) {
          return rank == 3 ? std::vector<int64_t>{batch, row, column} : std::vector<int64_t>{row, column};
        };
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += element(a, index(m, k)) * element(b, index(k, n));
        double expected = w.alpha * sum;
        if (w.inputs.size() == 3) {
          const GraphOperand& addend = w.inputs[2];
          std::vector<int64_t> at = index(m, n);
          for (size_t d = 0; d < at.size(); ++d)
            if (addend.sizes[d] == 1) at[d] = 0;
          expected += w.beta * element(addend, at);
        }
        const double error = std::fabs(element(w.output, index(m, n)) - expected) / (1 + std::fabs(expected));
        worst = std::max(worst, error);
      }
  expect(worst <= tolerance, what + ": largest relative error " + std::to_string(worst));
}

void expect_convolution(const GraphWorkload& w, double tolerance, const std::string& what) {
  const GraphOperand& x = w.inputs[0];
  const GraphOperand& weight = w.inputs[1];
  const std::vector<int64_t>& out = w.output.sizes;
  const int64_t per_group_in = weight.sizes[1], per_group_out = out[1] / w.groups;
  double worst = 0;
  for (int64_t n = 0; n < out[0]; ++n)
    for (int64_t o = 0; o < out[1]; ++o)
      for (int64_t y = 0; y < out[2]; ++y)
        for (int64_t xo = 0; xo < out[3]; ++xo) {
          double expected = w.inputs.size() == 3 ? element(w.inputs[2], {o}) : 0.0;
          const int64_t group = o / per_group_out;
          for (int64_t c = 0; c < per_group_in; ++c)
            for (int64_t ky = 0; ky < weight.sizes[2]; ++ky)
              for (int64_t kx = 0; kx < weight.sizes[3]; ++kx) {
                const int64_t iy = y * w.stride[0] - w.padding[0] + ky * w.dilation[0];
                const int64_t ix = xo * w.stride[1] - w.padding[1] + kx * w.dilation[1];
                if (iy < 0 || ix < 0 || iy >= x.sizes[2] || ix >= x.sizes[3]) continue;
                expected += element(x, {n, group * per_group_in + c, iy, ix}) * element(weight, {o, c, ky, kx});
              }
          const double error = std::fabs(element(w.output, {n, o, y, xo}) - expected) / (1 + std::fabs(expected));
          worst = std::max(worst, error);
        }
  expect(worst <= tolerance, what + ": largest relative error " + std::to_string(worst));
}

GraphWorkload matmul_workload(Device& device, GraphDataType dtype, int64_t M, int64_t K, int64_t N,
                              bool b_transposed, size_t a_offset) {
  GraphWorkload w;
  w.inputs.push_back(make_operand(device, {M, K}, {K, 1}, a_offset, dtype, 1));
  w.inputs.push_back(b_transposed ? make_operand(device, {K, N}, {1, K}, 0, dtype, 2)
                                  : make_operand(device, {K, N}, {N, 1}, 0, dtype, 2));
  w.output = make_output(device, {M, N}, dtype);
  return w;
}

Status run_graph(CommandQueue& queue, const GraphWorkload& workload) {
  Status encoded;
  Status outcome = run(queue, [&](CommandBuffer& command_buffer) { encoded = command_buffer.encode_graph(workload); });
  expect(encoded.ok(), "encode_graph: " + encoded.message());
  return outcome;
}

void graphs() {
  auto device = make_device();
  expect(device->runs_graphs(), "the Metal device runs graphs (macOS 15)");
  auto queue = device->new_command_queue();
  fake_metal::clear_logs();
  const size_t built = fake_metal::graphs_built();

  // mm, f32, operand at an offset.
  GraphWorkload mm = matmul_workload(*device, GraphDataType::float32, 5, 7, 3, false, 64);
  expect(run_graph(*queue, mm).ok(), "mm completes");
  expect_matmul(mm, 1e-6, "mm");
  expect(fake_metal::graphs_built() == built + 1, "the first mm builds a graph");
  // The same op, shapes, strides and dtypes over other memory: the cached graph.
  GraphWorkload again = matmul_workload(*device, GraphDataType::float32, 5, 7, 3, false, 128);
  expect(run_graph(*queue, again).ok(), "repeated mm completes");
  expect_matmul(again, 1e-6, "repeated mm");
  expect(fake_metal::graphs_built() == built + 1, "a repeat hits the cache");
  for (auto [label, workload] :
       {std::pair<const char*, GraphWorkload>{"new shape", matmul_workload(*device, GraphDataType::float32, 5, 8, 3, false, 0)},
        {"new strides", matmul_workload(*device, GraphDataType::float32, 5, 7, 3, true, 0)},
        {"new dtype", matmul_workload(*device, GraphDataType::bfloat16, 5, 7, 3, false, 0)}}) {
    const size_t before = fake_metal::graphs_built();
    expect(run_graph(*queue, workload).ok(), std::string(label) + " completes");
    expect_matmul(workload, workload.output.dtype == GraphDataType::float32 ? 1e-6 : 1e-2, label);
    expect(fake_metal::graphs_built() == before + 1, std::string(label) + " misses the cache");
  }

  // addmm: b transposed, a bias broadcast over rows, alpha and beta.
  GraphWorkload addmm = matmul_workload(*device, GraphDataType::float32, 4, 6, 5, true, 0);
  addmm.inputs.push_back(make_operand(*device, {1, 5}, {5, 1}, 8, GraphDataType::float32, 3));
  addmm.alpha = 0.5;
  addmm.beta = 2.0;
  expect(run_graph(*queue, addmm).ok(), "addmm completes");
  expect_matmul(addmm, 1e-6, "addmm");

  // bmm in float16, a transposed.
  GraphWorkload bmm;
  bmm.inputs.push_back(make_operand(*device, {3, 4, 6}, {24, 1, 4}, 0, GraphDataType::float16, 4));
  bmm.inputs.push_back(make_operand(*device, {3, 6, 5}, {30, 5, 1}, 2, GraphDataType::float16, 5));
  bmm.output = make_output(*device, {3, 4, 5}, GraphDataType::float16);
  expect(run_graph(*queue, bmm).ok(), "bmm completes");
  expect_matmul(bmm, 2e-3, "bmm float16");

  // conv2d: groups, stride, padding, dilation (y and x differ), bias.
  GraphWorkload conv;
  conv.op = GraphWorkload::Op::convolution2d;
  conv.inputs.push_back(make_operand(*device, {2, 4, 7, 6}, row_major({2, 4, 7, 6}), 16, GraphDataType::float32, 6));
  conv.inputs.push_back(make_operand(*device, {6, 2, 3, 2}, row_major({6, 2, 3, 2}), 0, GraphDataType::float32, 7));
  conv.inputs.push_back(make_operand(*device, {6}, {1}, 4, GraphDataType::float32, 8));
  conv.stride[0] = 2;
  conv.padding[0] = 1;
  conv.padding[1] = 2;
  conv.dilation[1] = 2;
  conv.groups = 2;
  conv.output = make_output(*device, {2, 6, 4, 8}, GraphDataType::float32);
  expect(run_graph(*queue, conv).ok(), "conv2d completes");
  expect_convolution(conv, 1e-6, "conv2d");

  // Order with kernels in one command buffer: a += 1 (kernel), out = a @ b (graph), out += 1
  // (kernel): out = (a + 1) @ b + 1.
  auto add_one = pipeline(*device, "add_one");
  GraphWorkload ordered = matmul_workload(*device, GraphDataType::float32, 4, 8, 4, false, 0);
  const float one = 1.0f;
  fake_metal::clear_logs();
  Status outcome = run(*queue, [&](CommandBuffer& command_buffer) {
    ComputeEncoder& encoder = command_buffer.compute_encoder();
    encoder.set_pipeline(add_one);
    encoder.set_buffer(ordered.inputs[0].buffer, 0, 0);
    encoder.set_bytes(&one, sizeof one, 1);
    encoder.dispatch_threads(Size3{32, 1, 1}, Size3{32, 1, 1});
    expect(command_buffer.encode_graph(ordered).ok(), "graph between kernels");
    ComputeEncoder& after = command_buffer.compute_encoder();
    after.set_pipeline(add_one);
    after.set_buffer(ordered.output.buffer, 0, 0);
    after.set_bytes(&one, sizeof one, 1);
    after.dispatch_threads(Size3{16, 1, 1}, Size3{16, 1, 1});
  });
  expect(outcome.ok(), "kernels and graph complete: " + outcome.message());
  // The reference reads a after the first kernel; out after the second holds product + 1.
  auto* out = static_cast<float*>(ordered.output.buffer->contents());
  for (int i = 0; i < 16; ++i) out[i] -= 1.0f;
  expect_matmul(ordered, 1e-6, "graph between kernels");
  const std::vector<std::string> log = fake_metal::command_log();
  std::vector<std::string> order;
  for (const std::string& entry : log)
    if (entry == "end" || entry == "graph" || entry == "compute concurrent" || entry == "commit") order.push_back(entry);
  std::string joined;
  for (const std::string& entry : order) joined += (joined.empty() ? "" : ", ") + entry;
  // With FAKE_METAL_GRAPH_COMMITS=1 MPSGraph commits the work so far itself
  // (commitAndContinue); the rest follows in the command buffer that continues it.
  const bool graph_commits = std::getenv("FAKE_METAL_GRAPH_COMMITS") != nullptr;
  expect_equal(joined,
               graph_commits ? "compute concurrent, end, graph, commit, compute concurrent, end, commit"
                             : "compute concurrent, end, graph, compute concurrent, end, commit",
               "the graph runs between the kernels' encoders");

  // Layouts the graph does not take are refused before anything is encoded.
  GraphWorkload strided = matmul_workload(*device, GraphDataType::float32, 4, 4, 4, false, 0);
  strided.inputs[0].strides = {8, 2};
  Status refused;
  run(*queue, [&](CommandBuffer& command_buffer) { refused = command_buffer.encode_graph(strided); });
  expect_contains(refused.message(), "layout MPSGraph does not take", "a strided operand is refused");
  GraphWorkload overrun = matmul_workload(*device, GraphDataType::float32, 4, 4, 4, false, 0);
  overrun.inputs[1].offset = 4;
  run(*queue, [&](CommandBuffer& command_buffer) { refused = command_buffer.encode_graph(overrun); });
  expect_equal(refused.message(), "a graph operand reaches outside its buffer", "an operand past its buffer's end");
  expect_no_violations("graphs");
}

void capture() {
  // Run under different environments by the test; prints what happened.
  std::unique_ptr<Device> device;
  Status status = metal::create_metal_device(&device);
  std::printf("create: %s\n", status.ok() ? "ok" : status.message().c_str());
  std::printf("capturing: %d\n", fake_metal::capture_running() ? 1 : 0);
  metal::stop_capture();
  metal::stop_capture();
  std::printf("capturing after stop: %d\n", fake_metal::capture_running() ? 1 : 0);
}

// Creates the device under ETMETAL_CAPTURE and exits normally: the capture must be stopped
// by the device's exit handler.
void capture_at_exit() {
  std::unique_ptr<Device> device;
  Status status = metal::create_metal_device(&device);
  expect(status.ok(), "create_metal_device: " + status.message());
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, void (*)()> scenarios = {
      {"device_properties", device_properties}, {"buffers", buffers},
      {"no_copy", no_copy},                     {"compile_options", compile_options},
      {"libraries", libraries},                 {"function_constants", function_constants},
      {"residency", residency},
      {"dispatches", dispatches},
      {"blits", blits},                         {"encoding_errors", encoding_errors},
      {"gpu_failure", gpu_failure},             {"lifetimes", lifetimes},
      {"completion", completion},               {"capture", capture},
      {"capture_at_exit", capture_at_exit},     {"graphs", graphs},
  };
  if (argc != 2 || !scenarios.count(argv[1])) {
    std::printf("usage: device_scenarios <scenario>\n");
    return 2;
  }
  scenarios.at(argv[1])();
  std::printf("done\n");
  std::fflush(stdout);
  if (std::string(argv[1]) == "capture_at_exit") return g_failures == 0 ? 0 : 1;
  // Skip static destructors: the fake's queue worker threads run until the process ends.
  std::_Exit(g_failures == 0 ? 0 : 1);
}
