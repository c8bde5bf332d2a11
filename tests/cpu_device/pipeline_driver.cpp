// Drives the CPU device's pipeline contract (compile_msl_library, CpuPipeline::execute)
// directly, for what the C ABI does not reach: dynamic threadgroup memory, argument-table
// validation, concurrent dispatches. Built by test_pipeline_contract.py with the device's
// sources (kernel objects get the executor's lane calls through their etm_cpu_lanes table).
// Prints one line per check: "name ok" or "name FAIL: why".
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "device/cpu/cpu_pipeline.h"

using namespace etm::device;
using namespace etm::device::cpu;

namespace {

int failures = 0;

void report(const char* name, bool ok, const std::string& why = "") {
  if (ok) {
    std::printf("%s ok\n", name);
  } else {
    ++failures;
    std::printf("%s FAIL: %s\n", name, why.c_str());
  }
}

std::shared_ptr<CpuPipeline> pipeline(const char* source, const char* name) {
  std::shared_ptr<Library> library;
  Status status = compile_msl_library(source, &library);
  if (!status.ok()) {
    std::printf("compile FAIL: %s\n", status.message().c_str());
    return nullptr;
  }
  std::shared_ptr<Pipeline> out;
  status = library->new_pipeline(name, &out);
  if (!status.ok()) {
    std::printf("pipeline FAIL: %s\n", status.message().c_str());
    return nullptr;
  }
  return std::static_pointer_cast<CpuPipeline>(out);
}

const char* kDynamic = R"(
#include <metal_stdlib>
using namespace metal;
kernel void dynamic_sums(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         threadgroup float* scratch [[threadgroup(0)]],
                         threadgroup uint* counter [[threadgroup(1)]],
                         uint gid [[thread_position_in_grid]],
                         uint lid [[thread_index_in_threadgroup]],
                         uint group [[threadgroup_position_in_grid]],
                         uint count [[threads_per_threadgroup]]) {
  threadgroup float fixed[4];
  scratch[lid] = in[gid];
  if (lid == 0) { counter[0] = 0; fixed[0] = 100.0f; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit((threadgroup atomic_uint*)counter, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == count - 1) {
    float sum = 0.0f;
    for (uint k = 0; k < count; ++k) sum += scratch[k];
    out[2 * group] = sum + fixed[0];
    out[2 * group + 1] = float(counter[0]);
  }
}
)";

DispatchArgs args_for(std::vector<void*> buffers, std::vector<size_t> lengths, uint64_t grid,
                      uint64_t group) {
  DispatchArgs args;
  args.buffers = std::move(buffers);
  args.buffer_lengths = std::move(lengths);
  args.grid = Size3{grid, 1, 1};
  args.threads_per_group = Size3{group, 1, 1};
  return args;
}

void check_dynamic_threadgroup_memory() {
  auto p = pipeline(kDynamic, "dynamic_sums");
  if (!p) return report("dynamic_threadgroup_memory", false, "no pipeline");
  const uint64_t n = 1000, group = 128, groups = (n + group - 1) / group;
  std::vector<float> in(n), out(2 * groups, -1.0f);
  for (uint64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 17) - 8.0f;
  DispatchArgs args = args_for({in.data(), out.data()}, {n * 4, out.size() * 4}, n, group);
  args.threadgroup_memory_lengths = {group * sizeof(float), 16};
  Status status = p->execute(args);
  bool ok = status.ok();
  std::string why = status.message();
  for (uint64_t g = 0; ok && g < groups; ++g) {
    float sum = 100.0f;
    const uint64_t count = std::min(group, n - g * group);
    for (uint64_t i = g * group; i < g * group + count; ++i) sum += in[i];
    if (out[2 * g] != sum || out[2 * g + 1] != static_cast<float>(count)) {
      ok = false;
      why = "group " + std::to_string(g) + ": " + std::to_string(out[2 * g]) + " / " +
            std::to_string(out[2 * g + 1]) + " expected " + std::to_string(sum) + " / " +
            std::to_string(count);
    }
  }
  report("dynamic_threadgroup_memory", ok, why);
  report("static_threadgroup_memory_length", p->static_threadgroup_memory_length() == 16,
         std::to_string(p->static_threadgroup_memory_length()));

  // 16 (static) + 32752 + 16 (dynamic) bytes is one granule too many.
  args.threadgroup_memory_lengths = {32752, 16};
  status = p->execute(args);
  report("threadgroup_memory_limit", !status.ok() && status.message().find("32768") != std::string::npos,
         status.ok() ? "accepted" : status.message());

  args.threadgroup_memory_lengths = {group * sizeof(float), 16};
  args.buffers[1] = nullptr;
  status = p->execute(args);
  report("unbound_buffer", !status.ok() && status.message().find("'out' (buffer 1) is not bound") !=
                                               std::string::npos,
         status.message());
}

const char* kScalar = R"(
#include <metal_stdlib>
kernel void add_scalar(device float* x [[buffer(0)]], constant long& value [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  x[i] += float(value);
}
)";

void check_reference_length_and_concurrency() {
  auto p = pipeline(kScalar, "add_scalar");
  if (!p) return report("reference_length", false, "no pipeline");
  std::vector<float> x(4096, 1.0f);
  int32_t small = 5;
  Status status = p->execute(args_for({x.data(), &small}, {x.size() * 4, 4}, x.size(), 64));
  report("reference_length", !status.ok() && status.message().find("reads 8 bytes") != std::string::npos,
         status.message());

  // Two threads dispatching at once (two command queues) each get their own result.
  std::vector<float> a(1 << 16, 0.0f), b(1 << 16, 0.0f);
  int64_t one = 1, two = 2;
  auto run = [&](std::vector<float>* data, int64_t* value, Status* result) {
    for (int k = 0; k < 20 && result->ok(); ++k) {
      *result = p->execute(args_for({data->data(), value}, {data->size() * 4, 8}, data->size(), 256));
    }
  };
  Status first, second;
  std::thread t1(run, &a, &one, &first), t2(run, &b, &two, &second);
  t1.join();
  t2.join();
  bool ok = first.ok() && second.ok();
  for (size_t i = 0; ok && i < a.size(); ++i) ok = a[i] == 20.0f && b[i] == 40.0f;
  report("concurrent_dispatches", ok, first.message() + second.message());
}

}  // namespace

int main() {
  check_dynamic_threadgroup_memory();
  check_reference_length_and_concurrency();
  return failures == 0 ? 0 : 1;
}
