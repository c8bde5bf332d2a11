// SIMD-group collectives, simdgroup matrices, barriers and atomics of the emulated Metal
// standard library, run on a small test executor: every GPU thread of a threadgroup is a host
// thread, and its lane calls (installed in etm_cpu_lanes) are a rendezvous with the
// semantics etm_lane.h specifies (lanes that returned, wait at a barrier or at another call
// site are inactive). Prints `name value...` lines for the test to compare with numpy.
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

// The address-space macros of <metal_stdlib> turn the token `thread` into nothing.
using host_thread = std::thread;

#include <metal_stdlib>
#include <c10/metal/atomic.h>
#include <c10/metal/reduction_utils.h>

using namespace metal;

namespace test_executor {

constexpr uint32_t simd_width = 32;
constexpr uint32_t max_value_size = 64;

enum class lane_status { running, at_site, at_barrier, finished };

struct lane {
  lane_status status = lane_status::running;
  const void* site = nullptr;
  uint32_t size = 0;
  unsigned char value[max_value_size] = {};
  unsigned char gathered[simd_width * max_value_size] = {};
  etm_cpu_simd_view view = {};
};

struct threadgroup_state {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<lane> lanes;
};

thread_local threadgroup_state* current_group = nullptr;
thread_local uint32_t current_thread = 0;

// Called with the lock held whenever a thread blocks or finishes. Once no thread of the group
// is running, completes every pending collective (per simdgroup, one per call site; all other
// lanes read as inactive), as the CPU device's fiber scheduler does; when only barrier waiters
// are left, releases the barrier.
void resolve(threadgroup_state& group) {
  const uint32_t threads = uint32_t(group.lanes.size());
  for (const lane& l : group.lanes)
    if (l.status == lane_status::running) return;
  bool resolved = false;
  for (uint32_t first = 0; first < threads; first += simd_width) {
    const uint32_t end = first + simd_width < threads ? first + simd_width : threads;
    for (;;) {
      const void* site = nullptr;
      for (uint32_t t = first; t < end && !site; ++t)
        if (group.lanes[t].status == lane_status::at_site) site = group.lanes[t].site;
      if (!site) break;
      unsigned char gathered[simd_width * max_value_size] = {};
      uint64_t active = 0;
      for (uint32_t t = first; t < end; ++t) {
        const lane& l = group.lanes[t];
        if (l.status != lane_status::at_site || l.site != site) continue;
        active |= uint64_t(1) << (t - first);
        std::memcpy(gathered + (t - first) * l.size, l.value, l.size);
      }
      for (uint32_t t = first; t < end; ++t) {
        lane& l = group.lanes[t];
        if (l.status != lane_status::at_site || l.site != site) continue;
        std::memcpy(l.gathered, gathered, sizeof gathered);
        l.view = {l.gathered, active, t - first, simd_width};
        l.status = lane_status::running;
      }
      resolved = true;
    }
  }
  if (!resolved)
    for (lane& l : group.lanes)
      if (l.status == lane_status::at_barrier) l.status = lane_status::running;
  group.changed.notify_all();
}

// Runs body(thread_index) as one threadgroup of `threads` GPU threads.
void run_threadgroup(uint32_t threads, const std::function<void(uint32_t)>& body) {
  threadgroup_state group;
  group.lanes.resize(threads);
  std::vector<host_thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&group, &body, t] {
      current_group = &group;
      current_thread = t;
      body(t);
      std::lock_guard<std::mutex> lock(group.mutex);
      group.lanes[t].status = lane_status::finished;
      resolve(group);
    });
  }
  for (host_thread& worker : workers) worker.join();
}

void simd_exchange(const void* site, const void* value, uint32_t size, etm_cpu_simd_view* out) {
  threadgroup_state& group = *current_group;
  std::unique_lock<std::mutex> lock(group.mutex);
  lane& me = group.lanes[current_thread];
  me.status = lane_status::at_site;
  me.site = site;
  me.size = size;
  if (size) std::memcpy(me.value, value, size);
  resolve(group);
  group.changed.wait(lock, [&] { return me.status == lane_status::running; });
  *out = me.view;
}

void threadgroup_barrier() {
  threadgroup_state& group = *current_group;
  std::unique_lock<std::mutex> lock(group.mutex);
  lane& me = group.lanes[current_thread];
  me.status = lane_status::at_barrier;
  resolve(group);
  group.changed.wait(lock, [&] { return me.status == lane_status::running; });
}

}  // namespace test_executor

namespace {

template <class T> void print_row(const char* name, const std::vector<T>& values) {
  std::printf("%s", name);
  for (const T& v : values) {
    if constexpr (is_floating_point_v<T>) {
      std::printf(" %.9g", double(v));
    } else if constexpr (is_signed_v<T>) {
      std::printf(" %lld", (long long)v);
    } else {
      std::printf(" %llu", (unsigned long long)v);
    }
  }
  std::printf("\n");
}

struct table {
  std::deque<std::pair<const char*, std::vector<double>>> rows;  // row() references stay valid
  std::vector<double>& row(const char* name, size_t size) {
    rows.push_back({name, std::vector<double>(size, -12345.0)});
    return rows.back().second;
  }
  void print(const char* prefix) const {
    for (const auto& entry : rows) {
      std::printf("%s.", prefix);
      print_row(entry.first, entry.second);
    }
  }
};

float input(uint32_t lane) { return float(lane) + 0.5f; }

// Every simd_ and quad_ function on a full simdgroup (threads == 32) or a partial one.
void collectives(const char* prefix, uint32_t threads) {
  table t;
  auto& sum = t.row("sum", threads);
  auto& product = t.row("product", threads);
  auto& minimum = t.row("min", threads);
  auto& maximum = t.row("max", threads);
  auto& bit_and = t.row("and", threads);
  auto& bit_or = t.row("or", threads);
  auto& bit_xor = t.row("xor", threads);
  auto& inclusive_sum = t.row("inclusive_sum", threads);
  auto& exclusive_sum = t.row("exclusive_sum", threads);
  auto& inclusive_product = t.row("inclusive_product", threads);
  auto& exclusive_product = t.row("exclusive_product", threads);
  auto& shuffled = t.row("shuffle", threads);
  auto& broadcast = t.row("broadcast9", threads);
  auto& broadcast_inactive = t.row("broadcast25", threads);
  auto& up = t.row("shuffle_up3", threads);
  auto& down = t.row("shuffle_down3", threads);
  auto& down_far = t.row("shuffle_down8", threads);
  auto& exclusive_or = t.row("shuffle_xor6", threads);
  auto& rotate_up = t.row("rotate_up5", threads);
  auto& rotate_down = t.row("rotate_down7", threads);
  auto& fill_down = t.row("fill_down4", threads);
  auto& fill_up = t.row("fill_up4", threads);
  auto& fill_down_modulo = t.row("fill_down3_mod8", threads);
  auto& fill_up_modulo = t.row("fill_up3_mod8", threads);
  auto& ballot = t.row("ballot_mod3", threads);
  auto& all_true = t.row("all_below40", threads);
  auto& all_partly = t.row("all_below19", threads);
  auto& any_one = t.row("any_is17", threads);
  auto& any_none = t.row("any_false", threads);
  auto& is_first = t.row("is_first", threads);
  auto& active_mask = t.row("active_mask", threads);
  auto& vote_all = t.row("vote_all_true", threads);
  auto& first = t.row("broadcast_first", threads);
  auto& vector_sum_y = t.row("float2_sum_y", threads);
  auto& half_sum = t.row("half_sum", threads);
  auto& quad_total = t.row("quad_sum", threads);
  auto& quad_down = t.row("quad_shuffle_down1", threads);
  auto& quad_exclusive_or = t.row("quad_shuffle_xor2", threads);
  auto& quad_cast = t.row("quad_broadcast3", threads);
  auto& quad_votes = t.row("quad_ballot_even", threads);
  auto& quad_scan = t.row("quad_exclusive_sum", threads);
  auto& quad_first = t.row("quad_is_first", threads);
  auto& quad_fill = t.row("quad_fill_down1", threads);
  auto& quad_rotate = t.row("quad_rotate_up1", threads);
  auto& float_xor = t.row("float_xor_bits", threads);
  auto& builtin_sum = t.row("builtin_sum", threads);
  auto& builtin_fill = t.row("builtin_fill_down4", threads);
  auto& builtin_lane = t.row("builtin_lane", threads);
  test_executor::run_threadgroup(threads, [&](uint32_t l) {
    const float x = input(l);
    const uint u = l * 7u + 3u;
    const float fill = 1000.0f + float(l);
    sum[l] = simd_sum(x);
    product[l] = simd_product(1.0f + float(l % 3) * 0.5f);
    minimum[l] = simd_min(int(l) - 10);
    maximum[l] = simd_max(x);
    bit_and[l] = simd_and(u | 0x100u);
    bit_or[l] = simd_or(u);
    bit_xor[l] = simd_xor(u);
    inclusive_sum[l] = simd_prefix_inclusive_sum(x);
    exclusive_sum[l] = simd_prefix_exclusive_sum(x);
    inclusive_product[l] = simd_prefix_inclusive_product(int(l % 2) + 1);
    exclusive_product[l] = simd_prefix_exclusive_product(int(l % 2) + 1);
    shuffled[l] = simd_shuffle(x, ushort((l * 5 + 3) % 32));
    broadcast[l] = simd_broadcast(x, ushort(9));
    broadcast_inactive[l] = simd_broadcast(x, ushort(25));
    up[l] = simd_shuffle_up(x, ushort(3));
    down[l] = simd_shuffle_down(x, ushort(3));
    down_far[l] = simd_shuffle_down(x, ushort(8));
    exclusive_or[l] = simd_shuffle_xor(x, ushort(6));
    rotate_up[l] = simd_shuffle_rotate_up(x, ushort(5));
    rotate_down[l] = simd_shuffle_rotate_down(x, ushort(7));
    fill_down[l] = simd_shuffle_and_fill_down(x, fill, ushort(4));
    fill_up[l] = simd_shuffle_and_fill_up(x, fill, ushort(4));
    fill_down_modulo[l] = simd_shuffle_and_fill_down(x, fill, ushort(3), ushort(8));
    fill_up_modulo[l] = simd_shuffle_and_fill_up(x, fill, ushort(3), ushort(8));
    ballot[l] = double(ulong(simd_ballot(l % 3 == 0)));
    all_true[l] = simd_all(l < 40);
    all_partly[l] = simd_all(l < 19);
    any_one[l] = simd_any(l == 17);
    any_none[l] = simd_any(false);
    is_first[l] = simd_is_first();
    active_mask[l] = double(ulong(simd_active_threads_mask()));
    vote_all[l] = simd_ballot(true).all();
    first[l] = simd_broadcast_first(x);
    vector_sum_y[l] = simd_sum(float2(x, 2.0f * x)).y;
    half_sum[l] = float(simd_sum(half(x)));
    quad_total[l] = quad_sum(x);
    quad_down[l] = quad_shuffle_down(x, ushort(1));
    quad_exclusive_or[l] = quad_shuffle_xor(x, ushort(2));
    quad_cast[l] = quad_broadcast(x, ushort(3));
    quad_votes[l] = double(ushort(quad_ballot(l % 2 == 0)));
    quad_scan[l] = quad_prefix_exclusive_sum(x);
    quad_first[l] = quad_is_first();
    quad_fill[l] = quad_shuffle_and_fill_down(x, fill, ushort(1));
    quad_rotate[l] = quad_shuffle_rotate_up(x, ushort(1));
    float_xor[l] = double(as_type<uint>(simd_xor(as_type<float>(u))));
    builtin_sum[l] = __metal_simd_sum(x);
    builtin_fill[l] = __metal_simd_shuffle_and_fill_down(x, fill, ushort(4), __metal_get_simdgroup_size(ushort()));
    builtin_lane[l] = __metal_get_thread_index_in_simdgroup(ushort());
  });
  t.print(prefix);
}

// Lanes that returned or wait at a barrier do not take part; two call sites are two collectives.
void divergence() {
  table t;
  auto& even_sum = t.row("even_sum", 32);
  auto& odd_sum = t.row("odd_sum", 32);
  auto& odd_first = t.row("odd_is_first", 32);
  auto& split_low = t.row("split_sum", 32);
  auto& same_line = t.row("same_line_sum", 32);
  auto& barrier_then_all = t.row("after_barrier_sum", 32);
  auto& neighbour = t.row("simdgroup_barrier_neighbour", 32);
  float shared[32] = {};
  test_executor::run_threadgroup(32, [&](uint32_t l) {
    const float x = input(l);
    shared[l] = x;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    neighbour[l] = shared[(l + 1) % 32];
    if (l % 2 == 0) {
      split_low[l] = simd_sum(x);
    } else {
      split_low[l] = simd_sum(10.0f * x);
    }
    same_line[l] = l < 12 ? simd_sum(x) : simd_sum(100.0f * x);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    barrier_then_all[l] = simd_sum(1.0f);
    if (l >= 24) return;
    if (l % 2 == 1) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      odd_sum[l] = simd_sum(x);
      odd_first[l] = simd_is_first();
    } else {
      even_sum[l] = simd_sum(x);
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  });
  t.print("divergence");
}

// c10's two-stage threadgroup reductions (64-bit sums go through simd_shuffle_and_fill_down and
// depend on inactive lanes reading as zero), over a threadgroup with a partial last simdgroup.
void c10_reductions(uint32_t threads) {
  std::vector<long> long_sums(threads);
  std::vector<float> float_sums(threads);
  std::vector<long> simd_long(threads);
  long long_scratch[32] = {};
  float float_scratch[32] = {};
  test_executor::run_threadgroup(threads, [&](uint32_t l) {
    const long value = (long(1) << 40) + long(l) * 1000003l;
    simd_long[l] = c10::metal::simd_sum(value);
    long_sums[l] = c10::metal::threadgroup_sum(long_scratch, value, l, threads);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float_sums[l] = c10::metal::threadgroup_sum(float_scratch, input(l), l, threads);
  });
  std::printf("c10.threads %u\n", threads);
  print_row("c10.simd_long_sum", simd_long);
  print_row("c10.threadgroup_long_sum", long_sums);
  print_row("c10.threadgroup_float_sum", float_sums);
}

void matrices() {
  float a_source[8 * 10], b_source[10 * 10], c_source[64];
  half a_half[64], b_half[64];
  for (int i = 0; i < 80; ++i) a_source[i] = float((i * 7) % 11) - 5.0f;
  for (int i = 0; i < 100; ++i) b_source[i] = float((i * 5) % 13) * 0.25f - 1.0f;
  for (int i = 0; i < 64; ++i) c_source[i] = float(i) * 0.5f;
  for (int i = 0; i < 64; ++i) a_half[i] = half(float(i % 9) - 4.0f);
  for (int i = 0; i < 64; ++i) b_half[i] = half(float(i % 5) * 0.5f);
  float d_out[64], e_out[8 * 9] = {}, identity_out[64], filled_out[64], mixed_out[64], operator_out[64];
  std::vector<float> elements_x(32), elements_y(32);
  test_executor::run_threadgroup(32, [&](uint32_t l) {
    simdgroup_float8x8 a, b, c, d, e;
    simdgroup_load(a, a_source, 10, ulong2(1, 0));
    simdgroup_load(b, b_source, 10, ulong2(2, 1), true);
    simdgroup_load(c, c_source);
    simdgroup_multiply_accumulate(d, a, b, c);
    simdgroup_store(d, d_out, 8);
    simdgroup_multiply(e, a, b);
    simdgroup_store(e, e_out, 9, ulong2(1, 0), true);
    elements_x[l] = a.thread_elements().x;
    elements_y[l] = a.thread_elements().y;
    simdgroup_float8x8 identity(2.0f);
    simdgroup_store(identity, identity_out);
    simdgroup_store(make_filled_simdgroup_matrix<float, 8, 8>(3.0f), filled_out);
    simdgroup_half8x8 ah, bh;
    simdgroup_load(ah, a_half);
    simdgroup_load(bh, b_half);
    simdgroup_float8x8 mixed;
    simdgroup_multiply_accumulate(mixed, ah, bh, c);
    simdgroup_store(mixed, mixed_out);
    simdgroup_store((a * b) * c, operator_out);
  });
  print_row("matrix.d", std::vector<float>(d_out, d_out + 64));
  print_row("matrix.e_transposed", std::vector<float>(e_out, e_out + 72));
  print_row("matrix.a_elements_x", elements_x);
  print_row("matrix.a_elements_y", elements_y);
  print_row("matrix.identity2", std::vector<float>(identity_out, identity_out + 64));
  print_row("matrix.filled3", std::vector<float>(filled_out, filled_out + 64));
  print_row("matrix.mixed", std::vector<float>(mixed_out, mixed_out + 64));
  print_row("matrix.operator_product", std::vector<float>(operator_out, operator_out + 64));
}

// Host threads hammer the same atomics, as threadgroups on several workers do.
void atomics() {
  constexpr int threads = 8, iterations = 20000;
  atomic_int counter;
  atomic_float float_sum;
  atomic_uint maximum, bits;
  atomic_int minimum, swapped;
  atomic_long wide;
  atomic_store_explicit(&counter, 0, memory_order_relaxed);
  atomic_store_explicit(&float_sum, 0.0f, memory_order_relaxed);
  atomic_store_explicit(&maximum, 0u, memory_order_relaxed);
  atomic_store_explicit(&bits, 0u, memory_order_relaxed);
  atomic_store_explicit(&minimum, 0, memory_order_relaxed);
  atomic_store_explicit(&swapped, 0, memory_order_relaxed);
  atomic_store_explicit(&wide, 0l, memory_order_relaxed);
  uint half_words[2] = {0u, 0u};  // four halves, updated through c10's 32-bit CAS helper
  std::vector<host_thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < iterations; ++i) {
        atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&float_sum, 1.0f, memory_order_relaxed);
        atomic_fetch_max_explicit(&maximum, uint(t * 100000 + i), memory_order_relaxed);
        atomic_fetch_min_explicit(&minimum, -(t * 100000 + i), memory_order_relaxed);
        atomic_fetch_or_explicit(&bits, 1u << ((t * iterations + i) % 32), memory_order_relaxed);
        atomic_fetch_add_explicit(&wide, long(1) << 33, memory_order_relaxed);
        int expected = atomic_load_explicit(&swapped, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(&swapped, &expected, expected + 2, memory_order_relaxed,
                                                      memory_order_relaxed)) {
        }
        if (i < 500)
          c10::metal::AtomicType<half>::atomic_add(reinterpret_cast<atomic<uint>*>(half_words), t % 4, half(1.0f));
      }
    });
  }
  for (host_thread& worker : workers) worker.join();
  std::printf("atomic.counter %d\n", atomic_load_explicit(&counter, memory_order_relaxed));
  std::printf("atomic.float_sum %.9g\n", double(atomic_load_explicit(&float_sum, memory_order_relaxed)));
  std::printf("atomic.max %u\n", atomic_load_explicit(&maximum, memory_order_relaxed));
  std::printf("atomic.min %d\n", atomic_load_explicit(&minimum, memory_order_relaxed));
  std::printf("atomic.or %u\n", atomic_load_explicit(&bits, memory_order_relaxed));
  std::printf("atomic.cas %d\n", atomic_load_explicit(&swapped, memory_order_relaxed));
  std::printf("atomic.long %ld\n", atomic_load_explicit(&wide, memory_order_relaxed));
  const half* halves = reinterpret_cast<const half*>(half_words);
  std::printf("atomic.c10_half_add %g %g %g %g\n", double(halves[0]), double(halves[1]), double(halves[2]),
              double(halves[3]));
  const int previous = atomic_exchange_explicit(&counter, 7, memory_order_relaxed);
  std::printf("atomic.exchange %d %d\n", previous, atomic_load_explicit(&counter, memory_order_relaxed));
  int wrong = 3;
  const bool replaced = atomic_compare_exchange_weak_explicit(&counter, &wrong, 9, memory_order_relaxed,
                                                              memory_order_relaxed);
  std::printf("atomic.failed_cas %d %d %d\n", int(replaced), wrong, atomic_load_explicit(&counter, memory_order_relaxed));
}

}  // namespace

int main() {
  etm_cpu_lanes = {test_executor::threadgroup_barrier, test_executor::simd_exchange};
  collectives("full", 32);
  collectives("partial", 20);
  divergence();
  c10_reductions(80);
  c10_reductions(20);
  matrices();
  atomics();
  return 0;
}
