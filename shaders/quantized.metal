// Weight-quantized linear layers: out[m, n] = sum_k a[m, k] * w[n, k], with w dequantized on
// the fly from one of three packed formats (FORMAT):
//
//   kAffine   torchao _linear_fp_act_{1..7}bit_weight (and MLX affine): each row of K values is
//             one little-endian bit stream (value k at bits [k*BITS, (k+1)*BITS)), so 8 values
//             fill BITS bytes; w = scale[n, g] * q + zero[n, g], g = k / group_size.
//   kInt4Pack torch _weight_int4pack_mm on MPS: the same 4-bit stream (even k in the low
//             nibble), scales_and_zeros[g, n, {0, 1}]; w = scale * (q - 8) + zero.
//   kInt8     torch _weight_int8pack_mm: signed bytes, one scale per row; w = scale[n] * q.
//
// Two kernels per format: qmv, the matrix-vector tile of MLX / llama.cpp (simdgroups of 4
// output rows, 16 values per lane per step, fp32 accumulation, simd_sum) for up to kQmvBatch
// activation rows at once, used for small M; and qmm, a 32x64 output tile staged through
// threadgroup memory, for larger M.
// Activations are indexed with strides; the output is a contiguous [M, N] tensor.
#include <metal_stdlib>
using namespace metal;
#include "params/quantized.h"

constant constexpr int kAffine = 0;
constant constexpr int kInt4Pack = 1;
constant constexpr int kInt8 = 2;

// The BITS bytes of 8 packed values as one integer: 32 bits suffice up to 4-bit values.
template <int BITS>
struct OctetWord {
  typedef ulong type;
};
template <>
struct OctetWord<1> {
  typedef uint type;
};
template <>
struct OctetWord<2> {
  typedef uint type;
};
template <>
struct OctetWord<3> {
  typedef uint type;
};
template <>
struct OctetWord<4> {
  typedef uint type;
};

// The 8 values that start at value index k (a multiple of 8) of a weight row. Values past K
// read as 0; packed formats only ever hold whole octets (K % 8 == 0).
template <int BITS, int FORMAT>
inline void load_octet(const device uchar* row, int k, int K, thread float* q) {
  if (FORMAT == kInt8) {
    for (int j = 0; j < 8; ++j) q[j] = k + j < K ? float(as_type<char>(row[k + j])) : 0.0f;
    return;
  }
  if (k >= K) {
    for (int j = 0; j < 8; ++j) q[j] = 0.0f;
    return;
  }
  const device uchar* octet = row + (k / 8) * BITS;
  typedef typename OctetWord<BITS>::type Word;
  Word packed = 0;
  for (int i = 0; i < BITS; ++i) packed |= Word(octet[i]) << (8 * i);
  const uint mask = (1u << BITS) - 1u;
  for (int j = 0; j < 8; ++j) q[j] = float(uint(packed >> (j * BITS)) & mask);
}

// (scale, bias) with w = scale * q + bias for row n, group g.
template <typename T, int FORMAT>
inline float2 scale_and_bias(const device T* scales, const device T* zeros,
                             constant QuantizedMatmulParams& p, int n, int g) {
  const float scale = float(scales[n * p.scale_stride_n + g * p.scale_stride_g]);
  if (FORMAT == kInt8) return float2(scale, 0.0f);
  const float zero = float(zeros[p.zero_offset + n * p.zero_stride_n + g * p.zero_stride_g]);
  if (FORMAT == kInt4Pack) return float2(scale, zero - 8.0f * scale);
  return float2(scale, zero);
}

// Must match the constants of native/ops/quantized_linear.cpp.
constant constexpr int kQmvRows = 4;       // output rows per simdgroup (a float4 of scales)
constant constexpr int kQmvSimdgroups = 32;  // simdgroups per threadgroup at most (the host may
                                             // launch fewer where the pipeline allows fewer threads)
constant constexpr int kQmvBatch = 8;        // activation rows per threadgroup
constant constexpr int kQmvValues = 16;     // values of K per lane per step
constant constexpr int kQmvStep = 32 * kQmvValues;

// Every weight byte and scale is read from device memory once per kQmvBatch activation rows:
// the threadgroup stages the step's activations in threadgroup memory (read once for its
// kQmvSimdgroups * kQmvRows output rows), each lane dequantizes its 16 values of 4 rows once
// for all the batch's rows, and the first lane of a quantization group reads its scale and
// bias and hands them to the group's other lanes.
template <typename T, int BITS, int FORMAT>
kernel void qmv(const device T* a [[buffer(0)]],
                const device uchar* w [[buffer(1)]],
                const device T* scales [[buffer(2)]],
                const device T* zeros [[buffer(3)]],
                device T* out [[buffer(4)]],
                constant QuantizedMatmulParams& p [[buffer(5)]],
                uint3 group_id [[threadgroup_position_in_grid]],
                uint simd_group [[simdgroup_index_in_threadgroup]],
                uint lane [[thread_index_in_simdgroup]],
                uint tid [[thread_index_in_threadgroup]],
                uint simdgroups [[dispatch_simdgroups_per_threadgroup]]) {
  const int threads = 32 * int(simdgroups);
  threadgroup float x_tile[kQmvBatch * kQmvStep];
  const int m0 = int(group_id.x) * kQmvBatch;
  const int batch = min(kQmvBatch, p.M - m0);
  const int n0 = (int(group_id.y) * int(simdgroups) + int(simd_group)) * kQmvRows;
  const int rows = clamp(p.N - n0, 0, kQmvRows);  // the same for the whole simdgroup
  const uint lanes_per_group = uint(min(p.group_size / kQmvValues, 32));
  const uint group_leader = lane - lane % lanes_per_group;

  float acc[kQmvRows][kQmvBatch];
  for (int r = 0; r < kQmvRows; ++r)
    for (int b = 0; b < kQmvBatch; ++b) acc[r][b] = 0.0f;
  for (int k0 = 0; k0 < p.K; k0 += kQmvStep) {
    for (int i = int(tid); i < batch * kQmvStep; i += threads) {
      const int b = i / kQmvStep, k = k0 + i % kQmvStep;
      x_tile[i] = k < p.K ? float(a[(m0 + b) * p.a_stride_m + k * p.a_stride_k]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int k = k0 + int(lane) * kQmvValues;
    const int g = k / p.group_size;  // a lane's 16 values never straddle a group
    float q[kQmvRows][kQmvValues];
    float4 own_scales = float4(0.0f), own_biases = float4(0.0f);  // one per row
    for (int r = 0; r < rows; ++r) {
      const int n = n0 + r;
      const device uchar* row = w + n * p.w_stride_n;
      load_octet<BITS, FORMAT>(row, k, p.K, q[r]);
      load_octet<BITS, FORMAT>(row, k + 8, p.K, q[r] + 8);
      if (lane == group_leader && k < p.K) {
        const float2 sb = scale_and_bias<T, FORMAT>(scales, zeros, p, n, g);
        own_scales[r] = sb.x;
        own_biases[r] = sb.y;
      }
    }
    const float4 row_scales = simd_shuffle(own_scales, ushort(group_leader));
    const float4 row_biases = simd_shuffle(own_biases, ushort(group_leader));
    for (int b = 0; b < batch; ++b) {
      threadgroup const float* xv = x_tile + b * kQmvStep + lane * kQmvValues;
      float x[kQmvValues];
      float x_sum = 0.0f;
      for (int j = 0; j < kQmvValues; ++j) {
        x[j] = xv[j];
        x_sum += x[j];
      }
      for (int r = 0; r < rows; ++r) {
        float dot = 0.0f;
        for (int j = 0; j < kQmvValues; ++j) dot += x[j] * q[r][j];
        acc[r][b] += row_scales[r] * dot + row_biases[r] * x_sum;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  // Fixed trip counts: every simdgroup reaches the same collectives (unused sums are zeros).
  for (int b = 0; b < kQmvBatch; ++b) {
    for (int r = 0; r < kQmvRows; ++r) {
      const float total = simd_sum(acc[r][b]);
      if (lane == 0 && b < batch && r < rows) out[long(m0 + b) * p.N + n0 + r] = T(total);
    }
  }
}

template <typename T, int BITS, int FORMAT>
kernel void qmm(const device T* a [[buffer(0)]],
                const device uchar* w [[buffer(1)]],
                const device T* scales [[buffer(2)]],
                const device T* zeros [[buffer(3)]],
                device T* out [[buffer(4)]],
                constant QuantizedMatmulParams& p [[buffer(5)]],
                uint3 group_id [[threadgroup_position_in_grid]],
                uint tid [[thread_index_in_threadgroup]]) {
  constexpr int kTileM = 32;  // output tile kTileM x kTileN, K step kTileK, 128 threads
  constexpr int kTileN = 64;
  constexpr int kTileK = 32;
  // Both tiles are stored k-major (a_tile[k][m], w_tile[k][n]), padded against bank conflicts.
  constexpr int kPitchA = kTileM + 1;
  constexpr int kPitchW = kTileN + 1;
  threadgroup float a_tile[kTileK * kPitchA];
  threadgroup float w_tile[kTileK * kPitchW];

  const int m0 = int(group_id.y) * kTileM;
  const int n0 = int(group_id.x) * kTileN;
  // Loading: thread t fills 8 consecutive k of activation row t / 4 and dequantizes 16
  // consecutive k of weight row t / 2.
  const int a_row = int(tid) / 4;
  const int a_k = (int(tid) % 4) * 8;
  const int w_row = int(tid) / 2;
  const int w_k = (int(tid) % 2) * 16;
  // Computing: thread t owns a 4x4 block of the output tile.
  const int tm = (int(tid) / 16) * 4;
  const int tn = (int(tid) % 16) * 4;

  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  const int m_load = m0 + a_row;
  const int n_load = n0 + w_row;
  for (int k0 = 0; k0 < p.K; k0 += kTileK) {
    for (int j = 0; j < 8; ++j) {
      const int k = k0 + a_k + j;
      a_tile[(a_k + j) * kPitchA + a_row] =
          m_load < p.M && k < p.K ? float(a[m_load * p.a_stride_m + k * p.a_stride_k]) : 0.0f;
    }
    const int k = k0 + w_k;
    if (n_load < p.N && k < p.K) {
      const device uchar* row = w + n_load * p.w_stride_n;
      float q[16];
      load_octet<BITS, FORMAT>(row, k, p.K, q);
      load_octet<BITS, FORMAT>(row, k + 8, p.K, q + 8);
      const float2 sb = scale_and_bias<T, FORMAT>(scales, zeros, p, n_load, k / p.group_size);
      for (int j = 0; j < 16; ++j) w_tile[(w_k + j) * kPitchW + w_row] = sb.x * q[j] + sb.y;
    } else {
      for (int j = 0; j < 16; ++j) w_tile[(w_k + j) * kPitchW + w_row] = 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4];
      float wv[4];
      for (int i = 0; i < 4; ++i) av[i] = a_tile[kk * kPitchA + tm + i];
      for (int j = 0; j < 4; ++j) wv[j] = w_tile[kk * kPitchW + tn + j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * wv[j];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + tm + i;
    if (m >= p.M) break;
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tn + j;
      if (n < p.N) out[long(m) * p.N + n] = T(acc[i][j]);
    }
  }
}

#define ETM_QMV_KERNEL(NAME, T, BITS, FORMAT)                                               \
  template [[host_name(NAME)]] kernel void qmv<T, BITS, FORMAT>(                            \
      const device T* a [[buffer(0)]], const device uchar* w [[buffer(1)]],                 \
      const device T* scales [[buffer(2)]], const device T* zeros [[buffer(3)]],            \
      device T* out [[buffer(4)]], constant QuantizedMatmulParams& p [[buffer(5)]],          \
      uint3 group_id [[threadgroup_position_in_grid]],                                      \
      uint simd_group [[simdgroup_index_in_threadgroup]],                                   \
      uint lane [[thread_index_in_simdgroup]], uint tid [[thread_index_in_threadgroup]],      \
      uint simdgroups [[dispatch_simdgroups_per_threadgroup]]);

#define ETM_QMM_KERNEL(NAME, T, BITS, FORMAT)                                   \
  template [[host_name(NAME)]] kernel void qmm<T, BITS, FORMAT>(                            \
      const device T* a [[buffer(0)]], const device uchar* w [[buffer(1)]],                 \
      const device T* scales [[buffer(2)]], const device T* zeros [[buffer(3)]],            \
      device T* out [[buffer(4)]], constant QuantizedMatmulParams& p [[buffer(5)]],          \
      uint3 group_id [[threadgroup_position_in_grid]],                                      \
      uint tid [[thread_index_in_threadgroup]]);

// Kernel names: {qmv,qmm}_{1..7bit,int4pack,int8}_{float,half,bfloat}.
#define ETM_QUANTIZED_PAIR(TAG, T, BITS, FORMAT)                                            \
  ETM_QMV_KERNEL("qmv_" TAG "_" #T, T, BITS, FORMAT)                                       \
  ETM_QMM_KERNEL("qmm_" TAG "_" #T, T, BITS, FORMAT)

#define ETM_QUANTIZED_TYPE(T)                                                               \
  ETM_QUANTIZED_PAIR("1bit", T, 1, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("2bit", T, 2, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("3bit", T, 3, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("4bit", T, 4, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("5bit", T, 5, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("6bit", T, 6, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("7bit", T, 7, kAffine)                                                 \
  ETM_QUANTIZED_PAIR("int4pack", T, 4, kInt4Pack)                                           \
  ETM_QUANTIZED_PAIR("int8", T, 8, kInt8)

ETM_QUANTIZED_TYPE(float)
ETM_QUANTIZED_TYPE(half)
ETM_QUANTIZED_TYPE(bfloat)
