// Triangular solves and LU unpacking (ATen semantics), float32, batched with broadcast batch
// dimensions (up to 6; stride 0 where an operand has size 1 or lacks the dimension).
// triangular_solve: one thread per (right-hand-side column, batch) solves M x = b by forward
//   (lower) or backward (upper) substitution, where M is A or, with `transpose`, A^T (so an upper
//   A transposed solves as lower); `unit` takes M's diagonal as 1. With `identity_rhs` the
//   right-hand side is the identity (cholesky_inverse). Results go to [batch, n, k] with
//   batches n * k apart and the rows and columns `x_strides` apart; a zero on the diagonal gives
//   inf / NaN, as in torch.
// copy_matrix: a contiguous copy of A broadcast to the batch (triangular_solve's second output).
// lu_lower / lu_upper: L (unit lower, [m, min(m, n)]) and U (upper, [min(m, n), n]) from LU.
// lu_permutation: one thread per batch applies the 1-based row swaps of `pivots` to 0 .. m - 1
//   (in `perm`, int64 scratch [batch, m]) and writes P[perm[i], i] = 1 into a zero P; a pivot
//   outside [1, m] is recorded in `fault` (1, value low and high words) and skipped.
#include <metal_stdlib>
using namespace metal;
#include "params/linear_algebra.h"

// Offsets of batch `batch` in two operands (the last batch dimension varies fastest).
inline void batch_offsets(uint batch, constant uint* sizes, uint dims, constant long* strides1, constant long* strides2,
                          thread long& offset1, thread long& offset2) {
  offset1 = 0;
  offset2 = 0;
  for (int d = int(dims) - 1; d >= 0; --d) {
    const uint coordinate = batch % sizes[d];
    batch /= sizes[d];
    offset1 += long(coordinate) * strides1[d];
    offset2 += long(coordinate) * strides2[d];
  }
}

kernel void triangular_solve(const device float* a [[buffer(0)]], const device float* b [[buffer(1)]],
                             device float* x [[buffer(2)]], constant SolveParams& p [[buffer(3)]],
                             uint2 position [[thread_position_in_grid]]) {
  const uint column = position.x, batch = position.y;
  long a_offset, b_offset;
  batch_offsets(batch, p.batch_sizes, p.batch_dims, p.a_batch_strides, p.b_batch_strides, a_offset, b_offset);
  const device float* matrix = a + a_offset;
  device float* solution = x + long(batch) * p.n * p.k + long(column) * p.x_strides[1];
  const long row_stride = p.transpose ? p.a_strides[1] : p.a_strides[0];
  const long column_stride = p.transpose ? p.a_strides[0] : p.a_strides[1];
  const bool lower = (p.upper != 0) == (p.transpose != 0);
  for (uint step = 0; step < p.n; ++step) {
    const uint i = lower ? step : p.n - 1 - step;
    float value = p.identity_rhs ? (i == column ? 1.0f : 0.0f)
                                 : b[b_offset + long(i) * p.b_strides[0] + long(column) * p.b_strides[1]];
    const uint first = lower ? 0 : i + 1, last = lower ? i : p.n;
    for (uint j = first; j < last; ++j) {
      value -= matrix[long(i) * row_stride + long(j) * column_stride] * solution[long(j) * p.x_strides[0]];
    }
    solution[long(i) * p.x_strides[0]] = p.unit ? value : value / matrix[long(i) * row_stride + long(i) * column_stride];
  }
}

kernel void copy_matrix(const device float* a [[buffer(0)]], device float* out [[buffer(1)]],
                        constant SolveParams& p [[buffer(2)]], uint3 position [[thread_position_in_grid]]) {
  const uint column = position.x, row = position.y, batch = position.z;
  long a_offset, unused;
  batch_offsets(batch, p.batch_sizes, p.batch_dims, p.a_batch_strides, p.a_batch_strides, a_offset, unused);
  out[(long(batch) * p.n + row) * p.n + column] = a[a_offset + long(row) * p.a_strides[0] + long(column) * p.a_strides[1]];
}

kernel void lu_lower(const device float* lu [[buffer(0)]], device float* lower [[buffer(1)]],
                     constant LuParams& p [[buffer(2)]], uint3 position [[thread_position_in_grid]]) {
  const uint column = position.x, row = position.y, batch = position.z;
  long offset, unused;
  batch_offsets(batch, p.batch_sizes, p.batch_dims, p.lu_batch_strides, p.lu_batch_strides, offset, unused);
  const float value = row > column ? lu[offset + long(row) * p.lu_strides[0] + long(column) * p.lu_strides[1]]
                                   : (row == column ? 1.0f : 0.0f);
  lower[(long(batch) * p.m + row) * p.k + column] = value;
}

kernel void lu_upper(const device float* lu [[buffer(0)]], device float* upper [[buffer(1)]],
                     constant LuParams& p [[buffer(2)]], uint3 position [[thread_position_in_grid]]) {
  const uint column = position.x, row = position.y, batch = position.z;
  long offset, unused;
  batch_offsets(batch, p.batch_sizes, p.batch_dims, p.lu_batch_strides, p.lu_batch_strides, offset, unused);
  const float value = column >= row ? lu[offset + long(row) * p.lu_strides[0] + long(column) * p.lu_strides[1]] : 0.0f;
  upper[(long(batch) * p.k + row) * p.n + column] = value;
}

inline void record_fault(device atomic_int* fault, long value) {
  int seen = 0;
  // Claim the record once; a weak exchange may fail spuriously, so retry while unclaimed.
  while (!atomic_compare_exchange_weak_explicit(&fault[0], &seen, 1, memory_order_relaxed, memory_order_relaxed)) {
    if (seen != 0) return;
  }
  atomic_store_explicit(&fault[1], int(uint(ulong(value) & 0xffffffffUL)), memory_order_relaxed);
  atomic_store_explicit(&fault[2], int(uint(ulong(value) >> 32)), memory_order_relaxed);
}

kernel void lu_permutation(const device int* pivots [[buffer(0)]], device long* perm [[buffer(1)]],
                           device float* permutation [[buffer(2)]], device atomic_int* fault [[buffer(3)]],
                           constant LuParams& p [[buffer(4)]], uint batch [[thread_position_in_grid]]) {
  long unused, offset;
  batch_offsets(batch, p.batch_sizes, p.batch_dims, p.pivot_batch_strides, p.pivot_batch_strides, offset, unused);
  device long* order = perm + long(batch) * p.m;
  for (uint i = 0; i < p.m; ++i) order[i] = i;
  for (uint i = 0; i < p.k; ++i) {
    const long pivot = long(pivots[offset + long(i) * p.pivot_stride]) - 1;
    if (pivot < 0 || pivot >= long(p.m)) {
      record_fault(fault, pivot + 1);
      continue;
    }
    const long swapped = order[i];
    order[i] = order[pivot];
    order[pivot] = swapped;
  }
  device float* matrix = permutation + long(batch) * p.m * p.m;
  for (uint i = 0; i < p.m; ++i) matrix[order[i] * p.m + i] = 1.0f;
}
