// RMS normalization (ATen's _fused_rms_norm): for every row (the elements of the normalized
// trailing dimensions), rstd = 1 / sqrt(mean(x^2) + eps) and out = x * rstd * weight, in
// float32 whatever the element type. One thread per row: it reads the row twice (the second
// read mostly from cache) and needs no cooperation with other threads.
#include <metal_stdlib>
using namespace metal;

constant constexpr uint kMaxDims = 8;

// Must match etm::ops::RmsNormParams (native/ops/normalization.cpp). Rows are numbered over
// the leading dimensions, columns over the normalized ones (last fastest in both).
struct RmsNormParams {
  long input_row_strides[kMaxDims];
  long input_column_strides[kMaxDims];
  long weight_column_strides[kMaxDims];
  uint row_sizes[kMaxDims];
  uint column_sizes[kMaxDims];
  uint row_dims;
  uint column_dims;
  uint rows;
  uint columns;
  uint has_weight;
  float eps;
};

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

template <typename T>
kernel void rms_norm(device const T* input [[buffer(0)]],
                     device const T* weight [[buffer(1)]],
                     device T* output [[buffer(2)]],
                     device float* rstd [[buffer(3)]],
                     constant RmsNormParams& p [[buffer(4)]],
                     uint row [[thread_position_in_grid]]) {
  if (row >= p.rows) return;
  long row_at = 0;
  uint rest = row;
  for (int d = int(p.row_dims) - 1; d >= 0; --d) {
    row_at += long(rest % p.row_sizes[d]) * p.input_row_strides[d];
    rest /= p.row_sizes[d];
  }
  float sum_of_squares = 0.0f;
  for (uint c = 0; c < p.columns; ++c) {
    const float x = float(input[row_at + column_offset(p, p.input_column_strides, c)]);
    sum_of_squares += x * x;
  }
  const float inverse = rsqrt(sum_of_squares / float(p.columns) + p.eps);
  rstd[row] = inverse;
  device T* out = output + ulong(row) * p.columns;
  for (uint c = 0; c < p.columns; ++c) {
    float y = float(input[row_at + column_offset(p, p.input_column_strides, c)]) * inverse;
    if (p.has_weight) y *= float(weight[column_offset(p, p.weight_column_strides, c)]);
    out[c] = T(y);
  }
}

template [[host_name("rms_norm_float")]] [[kernel]] decltype(rms_norm<float>) rms_norm<float>;
template [[host_name("rms_norm_half")]] [[kernel]] decltype(rms_norm<half>) rms_norm<half>;
template [[host_name("rms_norm_bfloat")]] [[kernel]] decltype(rms_norm<bfloat>) rms_norm<bfloat>;
