// RMS normalization (ATen's _fused_rms_norm): for every row (the elements of the normalized
// trailing dimensions), rstd = 1 / sqrt(mean(x^2) + eps) and out = x * rstd * weight, in
// float32 whatever the element type. One threadgroup per block of rows: each thread keeps its
// share of a row in registers (runs of kRun consecutive elements, up to kPerThread), so the
// row is read from device memory once; simd_sum and one threadgroup step reduce the sum of
// squares. The weight is loaded once per threadgroup and reused for all its rows. Rows longer
// than threads * kPerThread are streamed twice instead.
#include <metal_stdlib>
using namespace metal;
#include "params/normalization.h"

// Must match the constants of native/ops/normalization.cpp.
constant constexpr uint kPerThread = 16;  // row elements a thread keeps in registers
constant constexpr uint kRun = 4;         // consecutive elements a thread reads per step

// Element offset of column `column` for the given column strides.
inline long column_offset(constant RmsNormParams& p, constant long* strides, uint column) {
  if (p.column_dims == 1) return long(column) * strides[0];
  long at = 0;
  for (int d = int(p.column_dims) - 1; d >= 0; --d) {
    at += long(column % p.column_sizes[d]) * strides[d];
    column /= p.column_sizes[d];
  }
  return at;
}

// The column of a thread's element i: runs of kRun, interleaved across the group's threads.
inline uint rms_column(uint i, uint t, uint threads) {
  return ((i / kRun) * threads + t) * kRun + i % kRun;
}

template <typename T>
kernel void rms_norm(device const T* input [[buffer(0)]],
                     device const T* weight [[buffer(1)]],
                     device T* output [[buffer(2)]],
                     device float* rstd [[buffer(3)]],
                     constant RmsNormParams& p [[buffer(4)]],
                     uint group [[threadgroup_position_in_grid]],
                     uint t [[thread_index_in_threadgroup]],
                     uint threads [[threads_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint simd [[simdgroup_index_in_threadgroup]]) {
  threadgroup float simd_sums[32];
  threadgroup float row_inverse;
  const uint per_thread = (p.columns + threads * kRun - 1) / (threads * kRun) * kRun;
  const bool in_registers = per_thread <= kPerThread;
  float w[kPerThread];
  if (in_registers) {
    for (uint i = 0; i < per_thread; ++i) {
      const uint c = rms_column(i, t, threads);
      w[i] = c >= p.columns ? 0.0f : p.has_weight ? float(weight[column_offset(p, p.weight_column_strides, c)]) : 1.0f;
    }
  }
  const uint first = group * p.rows_per_group;
  const uint last = min(first + p.rows_per_group, p.rows);
  for (uint row = first; row < last; ++row) {
    long row_at = 0;
    uint rest = row;
    for (int d = int(p.row_dims) - 1; d >= 0; --d) {
      row_at += long(rest % p.row_sizes[d]) * p.input_row_strides[d];
      rest /= p.row_sizes[d];
    }
    float x[kPerThread];
    float sum_of_squares = 0.0f;
    if (in_registers) {
      for (uint i = 0; i < per_thread; ++i) {
        const uint c = rms_column(i, t, threads);
        x[i] = c < p.columns ? float(input[row_at + column_offset(p, p.input_column_strides, c)]) : 0.0f;
        sum_of_squares += x[i] * x[i];
      }
    } else {
      for (uint c = t * kRun; c < p.columns; c += threads * kRun) {
        for (uint j = c; j < min(c + kRun, p.columns); ++j) {
          const float value = float(input[row_at + column_offset(p, p.input_column_strides, j)]);
          sum_of_squares += value * value;
        }
      }
    }
    sum_of_squares = simd_sum(sum_of_squares);
    if (lane == 0) simd_sums[simd] = sum_of_squares;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) {
      float total = 0.0f;
      for (uint s = 0; s < (threads + 31) / 32; ++s) total += simd_sums[s];
      const float inverse = rsqrt(total / float(p.columns) + p.eps);
      row_inverse = inverse;
      rstd[row] = inverse;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float inverse = row_inverse;
    device T* out = output + ulong(row) * p.columns;
    if (in_registers) {
      for (uint i = 0; i < per_thread; ++i) {
        const uint c = rms_column(i, t, threads);
        if (c < p.columns) out[c] = T(x[i] * inverse * w[i]);
      }
    } else {
      for (uint c = t * kRun; c < p.columns; c += threads * kRun) {
        for (uint j = c; j < min(c + kRun, p.columns); ++j) {
          float y = float(input[row_at + column_offset(p, p.input_column_strides, j)]) * inverse;
          if (p.has_weight) y *= float(weight[column_offset(p, p.weight_column_strides, j)]);
          out[j] = T(y);
        }
      }
    }
  }
}

template [[host_name("rms_norm_float")]] [[kernel]] decltype(rms_norm<float>) rms_norm<float>;
template [[host_name("rms_norm_half")]] [[kernel]] decltype(rms_norm<half>) rms_norm<half>;
template [[host_name("rms_norm_bfloat")]] [[kernel]] decltype(rms_norm<bfloat>) rms_norm<bfloat>;
