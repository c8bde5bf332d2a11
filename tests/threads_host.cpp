// A multi-threaded C++ host of the public ABI, for ThreadSanitizer (tools/run_tsan.sh builds
// it and libetmetal with -fsanitize=thread) and for the default test run (test_threads.py
// builds it plainly). Eight threads at once:
//   - compile one MSL source concurrently (the same library source and the kernel cache),
//   - run a barrier reduction and a simd_sum kernel on their own streams,
//   - pass tensors around a ring, committing without waiting: each thread's work must come
//     after the previous thread's (the cross-thread ordering contract),
//   - create and delete tensors while the others do.
// Prints "ok" and exits 0, or prints the first broken expectation and exits 1.
#include <etmetal/etmetal.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* kSource = R"(
#include <metal_stdlib>
using namespace metal;
kernel void affine(device uint* x [[buffer(0)]], constant long& add [[buffer(1)]],
                   uint i [[thread_position_in_grid]]) {
  x[i] = x[i] * 3u + uint(add);
}
kernel void group_sum(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                      uint t [[thread_index_in_threadgroup]],
                      uint g [[threadgroup_position_in_grid]],
                      uint size [[threads_per_threadgroup]]) {
  threadgroup float partial[64];
  partial[t] = in[g * size + t];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = size / 2; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (t == 0) out[g] = partial[0];
}
kernel void lane_sum(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
  out[i] = simd_sum(in[i]);
}
)";

constexpr int kThreads = 8;
// Small groups: under ThreadSanitizer every fiber counts as a thread (at most 8128 live), and
// each of the nine streams' queue threads keeps a fiber per thread of its largest group.
constexpr int kGroups = 64;
constexpr int kGroupSize = 64;
constexpr int kRingLength = 4096;
constexpr int kLaps = 3;

std::mutex g_failure_mutex;
std::string g_failure;

void fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_failure_mutex);
  if (g_failure.empty()) g_failure = what + ": " + etmetal_last_error();
}

bool failed() {
  std::lock_guard<std::mutex> lock(g_failure_mutex);
  return !g_failure.empty();
}

bool check(AOTITorchError error, const char* what) {
  if (error != 0) fail(what);
  return error == 0;
}

AtenTensorHandle new_tensor(int64_t count, int32_t dtype) {
  const int64_t stride = 1;
  AtenTensorHandle tensor = nullptr;
  check(aoti_torch_empty_strided(1, &count, &stride, dtype, aoti_torch_device_type_mps(), 0,
                                 &tensor),
        "empty_strided");
  return tensor;
}

template <typename T>
T* data_of(AtenTensorHandle tensor) {
  void* data = nullptr;
  check(aoti_torch_get_data_ptr(tensor, &data), "get_data_ptr");
  return static_cast<T*>(data);
}

struct Kernels {
  AOTIMetalShaderLibraryHandle library = nullptr;
  AOTIMetalKernelFunctionHandle affine = nullptr, group_sum = nullptr, lane_sum = nullptr;
};

Kernels compile() {
  Kernels k;
  if (!check(aoti_torch_mps_create_shader_library(kSource, &k.library), "create_shader_library"))
    return k;
  check(aoti_torch_mps_get_kernel_function(k.library, "affine", &k.affine), "affine");
  check(aoti_torch_mps_get_kernel_function(k.library, "group_sum", &k.group_sum), "group_sum");
  check(aoti_torch_mps_get_kernel_function(k.library, "lane_sum", &k.lane_sum), "lane_sum");
  return k;
}

// Reductions on the calling thread's stream, checked against sums of small integers (exact
// in float).
void reductions(const Kernels& k, int seed) {
  AtenTensorHandle in = new_tensor(kGroups * kGroupSize, aoti_torch_dtype_float32());
  AtenTensorHandle groups = new_tensor(kGroups, aoti_torch_dtype_float32());
  AtenTensorHandle lanes = new_tensor(kGroups * kGroupSize, aoti_torch_dtype_float32());
  float* values = data_of<float>(in);
  for (int i = 0; i < kGroups * kGroupSize; ++i) values[i] = float((i * 7 + seed) % 13);
  const uint64_t grid = kGroups * kGroupSize, group = kGroupSize;
  check(aoti_torch_mps_start_encoding(k.group_sum), "start group_sum");
  check(aoti_torch_mps_set_arg_tensor(k.group_sum, 0, groups), "bind");
  check(aoti_torch_mps_set_arg_tensor(k.group_sum, 1, in), "bind");
  check(aoti_torch_mps_dispatch_array_with_group_size(k.group_sum, &grid, 1, &group, 1),
        "dispatch group_sum");
  check(aoti_torch_mps_start_encoding(k.lane_sum), "start lane_sum");
  check(aoti_torch_mps_set_arg_tensor(k.lane_sum, 0, lanes), "bind");
  check(aoti_torch_mps_set_arg_tensor(k.lane_sum, 1, in), "bind");
  check(aoti_torch_mps_dispatch_array_with_group_size(k.lane_sum, &grid, 1, &group, 1),
        "dispatch lane_sum");
  if (check(etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT), "synchronize reductions")) {
    const float* group_sums = data_of<float>(groups);
    const float* lane_sums = data_of<float>(lanes);
    for (int g = 0; g < kGroups; ++g) {
      float expected = 0;
      for (int t = 0; t < kGroupSize; ++t) expected += values[g * kGroupSize + t];
      if (group_sums[g] != expected) fail("group_sum of group " + std::to_string(g));
      for (int simd = 0; simd < kGroupSize / 32; ++simd) {
        float lane_expected = 0;
        for (int l = 0; l < 32; ++l) lane_expected += values[g * kGroupSize + simd * 32 + l];
        if (lane_sums[g * kGroupSize + simd * 32 + 5] != lane_expected)
          fail("simd_sum of group " + std::to_string(g));
      }
    }
  }
  for (AtenTensorHandle t : {in, groups, lanes}) aoti_torch_delete_tensor_object(t);
}

// One ring slot per thread: a tensor handed over with the number of hops it has made.
struct Inbox {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<AtenTensorHandle, int>> items;

  void put(AtenTensorHandle tensor, int hops) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      items.emplace_back(tensor, hops);
    }
    ready.notify_one();
  }
  std::pair<AtenTensorHandle, int> take() {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait(lock, [&] { return !items.empty(); });
    auto item = items.front();
    items.pop_front();
    return item;
  }
};

Inbox g_inboxes[kThreads];
Inbox g_finished;

void worker(int index, const Kernels& shared) {
  const Kernels own = compile();  // the same source from every thread at once
  if (own.library) aoti_torch_mps_delete_shader_library(own.library);
  reductions(shared, index);
  for (int lap = 0; lap < kLaps; ++lap) {
    auto [tensor, hops] = g_inboxes[index].take();
    if (!tensor) return;
    check(aoti_torch_mps_start_encoding(shared.affine), "start affine");
    check(aoti_torch_mps_set_arg_tensor(shared.affine, 0, tensor), "bind");
    check(aoti_torch_mps_set_arg_int(shared.affine, 1, index + 1), "bind int");
    check(aoti_torch_mps_dispatch_single_with_group_size(shared.affine, kRingLength, kGroupSize),
          "dispatch affine");
    check(etmetal_synchronize(ETMETAL_SYNC_COMMIT), "commit");  // no wait: ordering is the runtime's
    // Churn the allocator and the handle registry meanwhile.
    AtenTensorHandle scratch = new_tensor(1000 + index, aoti_torch_dtype_float32());
    aoti_torch_delete_tensor_object(scratch);
    if (hops + 1 == kThreads * kLaps)
      g_finished.put(tensor, hops + 1);
    else
      g_inboxes[(index + 1) % kThreads].put(tensor, hops + 1);
  }
  check(etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT), "final synchronize");
}

}  // namespace

int main() {
  const Kernels shared = compile();
  if (failed()) {
    std::printf("FAILED: %s\n", g_failure.c_str());
    return 1;
  }
  AtenTensorHandle token = new_tensor(kRingLength, aoti_torch_dtype_uint32());
  uint32_t* start = data_of<uint32_t>(token);
  for (int i = 0; i < kRingLength; ++i) start[i] = uint32_t(i);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i, std::cref(shared));
  g_inboxes[0].put(token, 0);
  AtenTensorHandle result = g_finished.take().first;
  for (std::thread& t : threads) t.join();
  if (!failed() && check(etmetal_tensor_wait(result), "tensor_wait")) {
    const uint32_t* values = data_of<uint32_t>(result);
    for (int i = 0; i < kRingLength; ++i) {
      uint32_t expected = uint32_t(i);
      for (int hop = 0; hop < kThreads * kLaps; ++hop) expected = expected * 3u + uint32_t(hop % kThreads + 1);
      if (values[i] != expected) {
        fail("ring element " + std::to_string(i) + " is " + std::to_string(values[i]) +
             ", expected " + std::to_string(expected));
        break;
      }
    }
  }
  aoti_torch_delete_tensor_object(result);
  aoti_torch_mps_delete_shader_library(shared.library);
  if (failed()) {
    std::printf("FAILED: %s\n", g_failure.c_str());
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
