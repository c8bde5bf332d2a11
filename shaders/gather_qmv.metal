// Mixture-of-experts matrix-vector products with 4-bit affine expert weights (MLX layout):
// y[p, n] = sum_k x[p, k] * w[e, n, k], e = indices[p], where row n of expert e packs two
// values per byte (even k in the low nibble) and w = scale[e, n, g] * q + bias[e, n, g],
// g = k / group_size.
//
// The tile is the MLX / llama.cpp matrix-vector tile: one threadgroup per (pair, 32 output
// rows), 8 simdgroups x 4 rows, 16 values of K per lane per step, fp32 accumulation, simd_sum;
// each weight byte, scale and bias is read from device memory once per pair.
// A pair whose expert index is outside [0, E) reads no weights and its output row is zero;
// the first such pair is recorded in `fault` (pair + 1, index), which the host reports as an
// error at the next synchronize.
#include <metal_stdlib>
using namespace metal;
#include "params/gather_qmv.h"

// 16 values starting at k (a multiple of 8) of a 4-bit row; values past K read as 0.
inline void load_4bit(const device uchar* row, int k, int K, thread float* q) {
  for (int half_block = 0; half_block < 2; ++half_block) {
    const int base = k + 8 * half_block;
    thread float* dst = q + 8 * half_block;
    if (base >= K) {
      for (int j = 0; j < 8; ++j) dst[j] = 0.0f;
      continue;
    }
    const device uchar* bytes = row + base / 2;
    for (int j = 0; j < 4; ++j) {
      const uint b = bytes[j];
      dst[2 * j] = float(b & 0xFu);
      dst[2 * j + 1] = float(b >> 4);
    }
  }
}

// Must match the constants of native/ops/gather_qmv.cpp.
constant constexpr int kRows = 4;        // output rows per simdgroup (a float4 of scales)
constant constexpr int kSimdgroups = 8;  // simdgroups per threadgroup
constant constexpr int kValues = 16;     // values of K per lane per step
constant constexpr int kStep = 32 * kValues;

template <typename T, typename I>
kernel void gather_qmv(const device T* x [[buffer(0)]],
                       const device uchar* w [[buffer(1)]],
                       const device T* scales [[buffer(2)]],
                       const device T* biases [[buffer(3)]],
                       const device I* indices [[buffer(4)]],
                       device T* out [[buffer(5)]],
                       constant GatherQmvParams& p [[buffer(6)]],
                       device atomic_int* fault [[buffer(7)]],
                       uint3 group_id [[threadgroup_position_in_grid]],
                       uint simd_group [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint tid [[thread_index_in_threadgroup]]) {
  constexpr int kThreads = 32 * kSimdgroups;
  threadgroup float x_tile[kStep];
  const int pair = int(group_id.x);
  const int n0 = (int(group_id.y) * kSimdgroups + int(simd_group)) * kRows;
  const int rows = clamp(p.N - n0, 0, kRows);  // the same for the whole simdgroup
  const long expert = long(indices[pair * p.index_stride]);
  const bool valid = expert >= 0 && expert < long(p.E);  // the same for the whole threadgroup
  if (!valid && group_id.y == 0 && tid == 0) {
    // Claim the record once; a weak exchange may fail spuriously, so retry while unclaimed.
    int seen = 0;
    while (!atomic_compare_exchange_weak_explicit(&fault[0], &seen, pair + 1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
      if (seen != 0) break;
    }
    if (seen == 0) {
      atomic_store_explicit(&fault[1], int(clamp(expert, long(numeric_limits<int>::min()),
                                                        long(numeric_limits<int>::max()))),
                            memory_order_relaxed);
    }
  }

  // The step's activations are staged in threadgroup memory (read once for the threadgroup's
  // kSimdgroups * kRows output rows); the first lane of a quantization group reads its scale
  // and bias and hands them to the group's other lanes.
  const uint lanes_per_group = uint(min(p.group_size / kValues, 32));
  const uint group_leader = lane - lane % lanes_per_group;
  float acc[kRows] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (valid) {
    const device T* x_row = x + pair * p.x_stride_p;
    const device uchar* w_expert = w + expert * p.w_stride_e;
    const device T* s_expert = scales + expert * p.scale_stride_e;
    const device T* b_expert = biases + expert * p.bias_stride_e;
    for (int k0 = 0; k0 < p.K; k0 += kStep) {
      for (int i = int(tid); i < kStep; i += kThreads) {
        x_tile[i] = k0 + i < p.K ? float(x_row[(k0 + i) * p.x_stride_k]) : 0.0f;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      const int k = k0 + int(lane) * kValues;
      float xv[kValues];
      float x_sum = 0.0f;
      for (int j = 0; j < kValues; ++j) {
        xv[j] = x_tile[int(lane) * kValues + j];
        x_sum += xv[j];
      }
      const int g = k / p.group_size;  // a lane's 16 values never straddle a group
      float dots[kRows];
      float4 own_scales = float4(0.0f), own_biases = float4(0.0f);  // one per row
      for (int r = 0; r < rows; ++r) {
        const int n = n0 + r;
        float q[kValues];
        load_4bit(w_expert + n * p.w_stride_n, k, p.K, q);
        dots[r] = 0.0f;
        for (int j = 0; j < kValues; ++j) dots[r] += xv[j] * q[j];
        if (lane == group_leader && k < p.K) {
          own_scales[r] = float(s_expert[n * p.scale_stride_n + g * p.scale_stride_g]);
          own_biases[r] = float(b_expert[n * p.bias_stride_n + g * p.bias_stride_g]);
        }
      }
      const float4 row_scales = simd_shuffle(own_scales, ushort(group_leader));
      const float4 row_biases = simd_shuffle(own_biases, ushort(group_leader));
      for (int r = 0; r < rows; ++r) acc[r] += row_scales[r] * dots[r] + row_biases[r] * x_sum;
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float total = simd_sum(acc[r]);
    if (lane == 0) out[long(pair) * p.N + n0 + r] = T(total);
  }
}

#define ETM_GATHER_QMV(T, I)                                                                 \
  template [[host_name("gather_qmv_" #T "_" #I)]] kernel void gather_qmv<T, I>(            \
      const device T* x [[buffer(0)]], const device uchar* w [[buffer(1)]],                 \
      const device T* scales [[buffer(2)]], const device T* biases [[buffer(3)]],           \
      const device I* indices [[buffer(4)]], device T* out [[buffer(5)]],                   \
      constant GatherQmvParams& p [[buffer(6)]], device atomic_int* fault [[buffer(7)]],     \
      uint3 group_id [[threadgroup_position_in_grid]],                                      \
      uint simd_group [[simdgroup_index_in_threadgroup]],                                   \
      uint lane [[thread_index_in_simdgroup]], uint tid [[thread_index_in_threadgroup]]);

ETM_GATHER_QMV(float, int)
ETM_GATHER_QMV(float, long)
ETM_GATHER_QMV(half, int)
ETM_GATHER_QMV(half, long)
ETM_GATHER_QMV(bfloat, int)
ETM_GATHER_QMV(bfloat, long)
