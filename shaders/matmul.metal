// Batched matrix products for mm, addmm, bmm and baddbmm:
//   out[b, m, n] = alpha * sum_k a[b, m, k] * b[b, k, n] + beta * addend[b, m, n]
// Every operand is bound at its first element and indexed through the strides in
// MatmulParams, so transposed, sliced and offset views need no copies. Products accumulate
// in float for every element type. The addend is read only when has_addend is set (the host
// clears it when beta == 0, so NaNs there never reach the result).
#include <metal_stdlib>
using namespace metal;
#include "params/matmul.h"

template <typename T>
inline void store_result(device T* out, const device T* addend, constant MatmulParams& p, long batch,
                         long row, long column, float product) {
  float value = p.alpha * product;
  if (p.has_addend) {
    const long at = batch * p.addend_strides[0] + row * p.addend_strides[1] + column * p.addend_strides[2];
    value += p.beta * float(addend[at]);
  }
  out[batch * p.out_strides[0] + row * p.out_strides[1] + column * p.out_strides[2]] = T(value);
}

// One thread per output element: small and oddly shaped problems, K == 0, and the
// matrix-vector case whose shared operand is read along a strided K (threads of a
// simdgroup then read neighbouring columns).
template <typename T>
kernel void matmul_naive(device T* out [[buffer(0)]],
                         const device T* a [[buffer(1)]],
                         const device T* b [[buffer(2)]],
                         const device T* addend [[buffer(3)]],
                         constant MatmulParams& p [[buffer(4)]],
                         uint3 position [[thread_position_in_grid]]) {
  const long column = position.x, row = position.y, batch = position.z;
  if (column >= p.columns || row >= p.rows || batch >= p.batch) return;
  const device T* a_row = a + batch * p.a_strides[0] + row * p.a_strides[1];
  const device T* b_column = b + batch * p.b_strides[0] + column * p.b_strides[2];
  float sum = 0.0f;
  for (long k = 0; k < p.depth; ++k) {
    sum += float(a_row[k * p.a_strides[2]]) * float(b_column[k * p.b_strides[1]]);
  }
  store_result(out, addend, p, batch, row, column, sum);
}

// One simdgroup per output element, its lanes splitting K: matrix-vector products (N == 1)
// where both operands are read along a unit-stride K.
constant constexpr uint kRowDotSimdgroups = 4;

template <typename T>
kernel void matmul_rowdot(device T* out [[buffer(0)]],
                          const device T* a [[buffer(1)]],
                          const device T* b [[buffer(2)]],
                          const device T* addend [[buffer(3)]],
                          constant MatmulParams& p [[buffer(4)]],
                          uint2 group [[threadgroup_position_in_grid]],
                          uint simdgroup [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
  const long element = long(group.x) * kRowDotSimdgroups + simdgroup;
  const long batch = group.y;
  if (element >= p.rows * p.columns) return;
  const long row = element / p.columns, column = element % p.columns;
  const device T* a_row = a + batch * p.a_strides[0] + row * p.a_strides[1];
  const device T* b_column = b + batch * p.b_strides[0] + column * p.b_strides[2];
  float sum = 0.0f;
  for (long k = lane; k < p.depth; k += 32) {
    sum += float(a_row[k * p.a_strides[2]]) * float(b_column[k * p.b_strides[1]]);
  }
  sum = simd_sum(sum);
  if (lane == 0) store_result(out, addend, p, batch, row, column, sum);
}

// Row vector times matrix (M == 1), every operand read from device memory once per
// threadgroup of kVectorSimdgroups simdgroups: the threadgroup stages kVectorChunk values of
// the vector in threadgroup memory per step. matmul_vector_kdot (b read along a unit-stride
// K, e.g. x @ weight.t()): each simdgroup owns kVectorOutputs outputs, its lanes splitting K.
// matmul_vector_columns (b read along a unit-stride N): each lane owns one output column, the
// simdgroups split K and add their partial sums at the end.
constant constexpr uint kVectorSimdgroups = 8;
constant constexpr uint kVectorThreads = 32 * kVectorSimdgroups;
constant constexpr uint kVectorChunk = 512;
constant constexpr uint kVectorOutputs = 4;

template <typename T>
inline void stage_vector(threadgroup float* x_tile, const device T* a_row, constant MatmulParams& p, long k0,
                         uint tid) {
  for (uint i = tid; i < kVectorChunk; i += kVectorThreads) {
    const long k = k0 + i;
    x_tile[i] = k < p.depth ? float(a_row[k * p.a_strides[2]]) : 0.0f;
  }
}

template <typename T>
kernel void matmul_vector_kdot(device T* out [[buffer(0)]],
                               const device T* a [[buffer(1)]],
                               const device T* b [[buffer(2)]],
                               const device T* addend [[buffer(3)]],
                               constant MatmulParams& p [[buffer(4)]],
                               uint2 group [[threadgroup_position_in_grid]],
                               uint simdgroup [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float x_tile[kVectorChunk];
  const long batch = group.y;
  const long column0 = (long(group.x) * kVectorSimdgroups + simdgroup) * kVectorOutputs;
  const uint outputs = uint(clamp(p.columns - column0, 0L, long(kVectorOutputs)));  // whole simdgroup
  const device T* a_row = a + batch * p.a_strides[0];
  const device T* b_batch = b + batch * p.b_strides[0];
  float sums[kVectorOutputs] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (long k0 = 0; k0 < p.depth; k0 += kVectorChunk) {
    stage_vector(x_tile, a_row, p, k0, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint chunk = uint(min(long(kVectorChunk), p.depth - k0));
    for (uint r = 0; r < outputs; ++r) {
      const device T* b_column = b_batch + (column0 + r) * p.b_strides[2] + k0;  // unit stride along K
      for (uint kk = lane; kk < chunk; kk += 32) sums[r] += x_tile[kk] * float(b_column[kk]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  // A fixed trip count: every simdgroup reaches the same collectives (unused sums are zeros).
  for (uint r = 0; r < kVectorOutputs; ++r) {
    const float sum = simd_sum(sums[r]);
    if (lane == 0 && r < outputs) store_result(out, addend, p, batch, 0, column0 + r, sum);
  }
}

template <typename T>
kernel void matmul_vector_columns(device T* out [[buffer(0)]],
                                  const device T* a [[buffer(1)]],
                                  const device T* b [[buffer(2)]],
                                  const device T* addend [[buffer(3)]],
                                  constant MatmulParams& p [[buffer(4)]],
                                  uint2 group [[threadgroup_position_in_grid]],
                                  uint simdgroup [[simdgroup_index_in_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]],
                                  uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float x_tile[kVectorChunk];
  threadgroup float partial_sums[kVectorThreads];
  const long batch = group.y;
  const long column = long(group.x) * 32 + lane;
  const bool present = column < p.columns;
  const device T* a_row = a + batch * p.a_strides[0];
  const device T* b_column = b + batch * p.b_strides[0] + column;  // unit stride along N
  float sum = 0.0f;
  for (long k0 = 0; k0 < p.depth; k0 += kVectorChunk) {
    stage_vector(x_tile, a_row, p, k0, tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint chunk = uint(min(long(kVectorChunk), p.depth - k0));
    if (present) {
      for (uint kk = simdgroup; kk < chunk; kk += kVectorSimdgroups) {
        sum += x_tile[kk] * float(b_column[(k0 + kk) * p.b_strides[1]]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  partial_sums[tid] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simdgroup == 0 && present) {
    float total = 0.0f;
    for (uint s = 0; s < kVectorSimdgroups; ++s) total += partial_sums[s * 32 + lane];
    store_result(out, addend, p, batch, 0, column, total);
  }
}

// Products with few rows (M < 16 after the host transposes those with N < M: LLM decode of a few
// sequences, x @ weight.t() of a small batch), the GPU launch shape: a threadgroup owns COLUMNS
// output columns of every row. Per DEPTH-deep step along K it stages the rows' slice of a and
// the columns' slice of b in threadgroup memory (neighbouring threads load along b's unit
// stride, K or N), then each thread accumulates the outputs of one column in kFewRowsMax /
// (kFewRowsThreads / COLUMNS) rows. b is read from device memory once and a once per
// threadgroup: device bytes about (1 + M / COLUMNS) x the minimum, where one thread per output
// (matmul_naive) reads b M times and a N times. matmul_few_rows_<T>: 64 columns, 64 deep;
// matmul_few_rows_wide_<T>, for more than 8 rows: 128 columns (half the re-reads of a), 32 deep
// (the b tile stays at 16 KB).
constant constexpr uint kFewRowsThreads = 256;
constant constexpr uint kFewRowsMax = 16;

template <typename T, uint COLUMNS, uint DEPTH>
kernel void matmul_few_rows(device T* out [[buffer(0)]],
                            const device T* a [[buffer(1)]],
                            const device T* b [[buffer(2)]],
                            const device T* addend [[buffer(3)]],
                            constant MatmulParams& p [[buffer(4)]],
                            uint2 group [[threadgroup_position_in_grid]],
                            uint tid [[thread_index_in_threadgroup]]) {
  constexpr uint kRowStride = kFewRowsThreads / COLUMNS;  // between a thread's rows
  constexpr uint kPerThread = kFewRowsMax / kRowStride;
  threadgroup float a_tile[kFewRowsMax][DEPTH];
  threadgroup float b_tile[DEPTH][COLUMNS + 1];  // + 1: transposed stores spread over banks
  const long batch = group.y;
  const long column0 = long(group.x) * COLUMNS;
  const uint rows = uint(p.rows);  // below kFewRowsMax (the host's condition)
  const uint columns = uint(min(long(COLUMNS), p.columns - column0));
  const device T* a_batch = a + batch * p.a_strides[0];
  const device T* b_block = b + batch * p.b_strides[0] + column0 * p.b_strides[2];
  const bool b_along_k = p.b_strides[1] == 1 && p.b_strides[2] != 1;
  const uint column = tid % COLUMNS, first_row = tid / COLUMNS;
  float sums[kPerThread];
  for (uint j = 0; j < kPerThread; ++j) sums[j] = 0.0f;
  for (long k0 = 0; k0 < p.depth; k0 += DEPTH) {
    const uint depth = uint(min(long(DEPTH), p.depth - k0));
    for (uint i = tid; i < kFewRowsMax * DEPTH; i += kFewRowsThreads) {
      const uint r = i / DEPTH, kk = i % DEPTH;
      a_tile[r][kk] = r < rows && kk < depth ? float(a_batch[r * p.a_strides[1] + (k0 + kk) * p.a_strides[2]]) : 0.0f;
    }
    for (uint i = tid; i < DEPTH * COLUMNS; i += kFewRowsThreads) {
      const uint kk = b_along_k ? i % DEPTH : i / COLUMNS;
      const uint c = b_along_k ? i / DEPTH : i % COLUMNS;
      b_tile[kk][c] = kk < depth && c < columns ? float(b_block[(k0 + kk) * p.b_strides[1] + c * p.b_strides[2]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint kk = 0; kk < DEPTH; ++kk) {  // past depth both tiles hold zeros
      const float w = b_tile[kk][column];
      for (uint j = 0; j < kPerThread; ++j) sums[j] += a_tile[first_row + j * kRowStride][kk] * w;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (column >= columns) return;
  for (uint j = 0; j < kPerThread; ++j) {
    const uint row = first_row + j * kRowStride;
    if (row < rows) store_result(out, addend, p, batch, row, column0 + column, sums[j]);
  }
}

// Products with few rows (M < 16: matrix-vector, LLM decode) for the CPU device, whose executor
// runs a kernel without barriers or SIMD-group calls as a plain loop over its threads. A thread
// computes a strip of one output row over the whole of K in float4 accumulators (named, not an
// array: at -O2 g++ keeps only those in registers), so its inner loop compiles to vector loads
// and arithmetic; each value of b it loads serves the row, each value of a the whole strip. The
// host puts the rows of one strip in consecutive threads (the loop's order), so b's strip is
// read from memory once and from cache for the other rows. When N < M the host runs the
// transposed product (out^T = b^T @ a^T), so the rows are always the short side.
// matmul_gemv_kdot: a and b unit-stride along K (x @ weight.t()); a thread owns four columns
// (clamped into the matrix: loads stay in bounds, only owned columns are stored).
// matmul_gemv_columns: b unit-stride along N (x @ weight); a thread owns 32 consecutive columns
// (whole 64-byte lines of b per k), the last strip of a row shifted left to end at N (the host
// requires N >= 32).
constant constexpr uint kGemvDotColumns = 4;
constant constexpr uint kGemvStripColumns = 32;

template <typename T>
inline float4 load_float4(const device T* p) {
  return float4(float(p[0]), float(p[1]), float(p[2]), float(p[3]));
}

inline float horizontal_sum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

template <typename T>
kernel void matmul_gemv_kdot(device T* out [[buffer(0)]],
                             const device T* a [[buffer(1)]],
                             const device T* b [[buffer(2)]],
                             const device T* addend [[buffer(3)]],
                             constant MatmulParams& p [[buffer(4)]],
                             uint3 position [[thread_position_in_grid]]) {
  const long row = position.x, owned = long(position.y) * kGemvDotColumns, batch = position.z;
  if (row >= p.rows || owned >= p.columns || batch >= p.batch) return;
  const device T* a_row = a + batch * p.a_strides[0] + row * p.a_strides[1];
  const device T* b_batch = b + batch * p.b_strides[0];
  const long last = p.columns - 1;
  const device T* w0 = b_batch + min(owned, last) * p.b_strides[2];
  const device T* w1 = b_batch + min(owned + 1, last) * p.b_strides[2];
  const device T* w2 = b_batch + min(owned + 2, last) * p.b_strides[2];
  const device T* w3 = b_batch + min(owned + 3, last) * p.b_strides[2];
  float4 s0 = float4(0.0f), s1 = float4(0.0f), s2 = float4(0.0f), s3 = float4(0.0f);
  long k = 0;
  for (; k + 4 <= p.depth; k += 4) {
    const float4 x = load_float4(a_row + k);
    s0 += x * load_float4(w0 + k);
    s1 += x * load_float4(w1 + k);
    s2 += x * load_float4(w2 + k);
    s3 += x * load_float4(w3 + k);
  }
  float4 sums = float4(horizontal_sum(s0), horizontal_sum(s1), horizontal_sum(s2), horizontal_sum(s3));
  for (; k < p.depth; ++k) {
    sums += float(a_row[k]) * float4(float(w0[k]), float(w1[k]), float(w2[k]), float(w3[k]));
  }
  for (uint c = 0; c < kGemvDotColumns; ++c) {
    if (owned + c < p.columns) store_result(out, addend, p, batch, row, owned + c, sums[c]);
  }
}

template <typename T>
kernel void matmul_gemv_columns(device T* out [[buffer(0)]],
                                const device T* a [[buffer(1)]],
                                const device T* b [[buffer(2)]],
                                const device T* addend [[buffer(3)]],
                                constant MatmulParams& p [[buffer(4)]],
                                uint3 position [[thread_position_in_grid]]) {
  const long row = position.x, owned = long(position.y) * kGemvStripColumns, batch = position.z;
  if (row >= p.rows || owned >= p.columns || batch >= p.batch) return;
  const long column0 = min(owned, p.columns - long(kGemvStripColumns));
  const device T* a_row = a + batch * p.a_strides[0] + row * p.a_strides[1];
  const device T* b_strip = b + batch * p.b_strides[0] + column0;  // unit stride along N
  float4 s0 = float4(0.0f), s1 = float4(0.0f), s2 = float4(0.0f), s3 = float4(0.0f);
  float4 s4 = float4(0.0f), s5 = float4(0.0f), s6 = float4(0.0f), s7 = float4(0.0f);
  for (long k = 0; k < p.depth; ++k) {
    const float x = float(a_row[k * p.a_strides[2]]);
    const device T* w = b_strip + k * p.b_strides[1];
    s0 += x * load_float4(w);
    s1 += x * load_float4(w + 4);
    s2 += x * load_float4(w + 8);
    s3 += x * load_float4(w + 12);
    s4 += x * load_float4(w + 16);
    s5 += x * load_float4(w + 20);
    s6 += x * load_float4(w + 24);
    s7 += x * load_float4(w + 28);
  }
  // Copied out after the loop: indexing the accumulators themselves would keep them in memory.
  const float4 sums[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (uint c = 0; c < kGemvStripColumns; ++c) {
    if (column0 + c >= owned) store_result(out, addend, p, batch, row, column0 + c, sums[c / 4][c % 4]);
  }
}

// Function constants of the tiled kernels, as MLX's GEMM specialises: aligned_blocks when M and N
// are multiples of the block, aligned_depth when K is a multiple of the step, drop the edge
// checks from staging and the epilogue (the host gives both to every tiled pipeline).
constant bool aligned_blocks [[function_constant(0)]];
constant bool aligned_depth [[function_constant(1)]];

// Tiled product on simdgroup matrices. A threadgroup of four simdgroups (2 x 2) computes a
// block of (16 * FragmentsM) x (16 * FragmentsN) outputs; each simdgroup owns
// FragmentsM x FragmentsN 8x8 accumulators. Per step of kTileDepth along K, the threads
// stage the A and B tiles in threadgroup memory as float (zero outside the matrices, so
// partial tiles need no special case), and the simdgroups multiply from there.
constant constexpr uint kTileDepth = 32;
constant constexpr uint kTiledThreads = 128;

template <typename T, uint FragmentsM, uint FragmentsN>
kernel void matmul_tiled(device T* out [[buffer(0)]],
                         const device T* a [[buffer(1)]],
                         const device T* b [[buffer(2)]],
                         const device T* addend [[buffer(3)]],
                         constant MatmulParams& p [[buffer(4)]],
                         threadgroup float* tiles [[threadgroup(0)]],
                         uint3 group [[threadgroup_position_in_grid]],
                         uint thread_index [[thread_index_in_threadgroup]],
                         uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  constexpr uint kBlockM = 16 * FragmentsM;
  constexpr uint kBlockN = 16 * FragmentsN;
  static_assert(kTiledThreads % kTileDepth == 0 && kTiledThreads % kBlockN == 0, "staging steps whole rows");
  // A tile: kBlockM x kTileDepth, then B tile: kTileDepth x kBlockN. The epilogue reuses
  // the same memory for the kBlockM x kBlockN results (the host sizes it for both).
  threadgroup float* a_tile = tiles;
  threadgroup float* b_tile = tiles + kBlockM * kTileDepth;

  const long batch = group.z;
  const long row0 = long(group.y) * kBlockM;
  const long column0 = long(group.x) * kBlockN;
  const device T* a_batch = a + batch * p.a_strides[0];
  const device T* b_batch = b + batch * p.b_strides[0];

  const uint simd_row = (simdgroup / 2) * 8 * FragmentsM;
  const uint simd_column = (simdgroup % 2) * 8 * FragmentsN;

  simdgroup_float8x8 accumulators[FragmentsM][FragmentsN];
  for (uint i = 0; i < FragmentsM; ++i) {
    for (uint j = 0; j < FragmentsN; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  for (long k0 = 0; k0 < p.depth; k0 += kTileDepth) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Thread t stages elements t, t + kTiledThreads, ... of each tile: one column of every
    // (kTiledThreads / width)-th row, so the loops step rows with the column fixed (on the CPU
    // device, a pointer step instead of a division and two multiplications per element).
    const long a_k = k0 + thread_index % kTileDepth;
    for (uint r = thread_index / kTileDepth; r < kBlockM; r += kTiledThreads / kTileDepth) {
      const long row = row0 + r;
      const bool inside = (aligned_blocks || row < p.rows) && (aligned_depth || a_k < p.depth);
      a_tile[r * kTileDepth + thread_index % kTileDepth] =
          inside ? float(a_batch[row * p.a_strides[1] + a_k * p.a_strides[2]]) : 0.0f;
    }
    const long b_column = column0 + thread_index % kBlockN;
    for (uint r = thread_index / kBlockN; r < kTileDepth; r += kTiledThreads / kBlockN) {
      const long k = k0 + r;
      const bool inside = (aligned_depth || k < p.depth) && (aligned_blocks || b_column < p.columns);
      b_tile[r * kBlockN + thread_index % kBlockN] =
          inside ? float(b_batch[k * p.b_strides[1] + b_column * p.b_strides[2]]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint kk = 0; kk < kTileDepth; kk += 8) {
      simdgroup_float8x8 a_fragments[FragmentsM];
      simdgroup_float8x8 b_fragments[FragmentsN];
      for (uint i = 0; i < FragmentsM; ++i) {
        simdgroup_load(a_fragments[i], a_tile, kTileDepth, ulong2(kk, simd_row + 8 * i));
      }
      for (uint j = 0; j < FragmentsN; ++j) {
        simdgroup_load(b_fragments[j], b_tile, kBlockN, ulong2(simd_column + 8 * j, kk));
      }
      for (uint i = 0; i < FragmentsM; ++i) {
        for (uint j = 0; j < FragmentsN; ++j) {
          simdgroup_multiply_accumulate(accumulators[i][j], a_fragments[i], b_fragments[j], accumulators[i][j]);
        }
      }
    }
  }

  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup float* results = tiles;
  for (uint i = 0; i < FragmentsM; ++i) {
    for (uint j = 0; j < FragmentsN; ++j) {
      simdgroup_store(accumulators[i][j], results, kBlockN, ulong2(simd_column + 8 * j, simd_row + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = thread_index; i < kBlockM * kBlockN; i += kTiledThreads) {
    const long row = row0 + i / kBlockN, column = column0 + i % kBlockN;
    if (aligned_blocks || (row < p.rows && column < p.columns)) {
      store_result(out, addend, p, batch, row, column, results[i]);
    }
  }
}

// Wide blocks for large problems: eight simdgroups in a GridRows x GridColumns grid, each
// computing 32 x 32 outputs, so a block is (32 * GridRows) x (32 * GridColumns) and each
// operand is read from device memory half as often as with 64 x 64 blocks along the wide side.
// The K steps are double-buffered: while the simdgroups multiply one staged step, the
// threadgroup stages the next into the other buffer, one barrier per step.
constant constexpr uint kWideDepth = 16;
constant constexpr uint kWideThreads = 256;

template <typename T, uint GridRows, uint GridColumns>
kernel void matmul_tiled_wide(device T* out [[buffer(0)]],
                              const device T* a [[buffer(1)]],
                              const device T* b [[buffer(2)]],
                              const device T* addend [[buffer(3)]],
                              constant MatmulParams& p [[buffer(4)]],
                              threadgroup float* tiles [[threadgroup(0)]],
                              uint3 group [[threadgroup_position_in_grid]],
                              uint thread_index [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  constexpr uint kBlockM = 32 * GridRows;
  constexpr uint kBlockN = 32 * GridColumns;
  constexpr uint kStage = kBlockM * kWideDepth + kWideDepth * kBlockN;
  static_assert(kWideThreads % kWideDepth == 0 && kWideThreads % kBlockN == 0, "staging steps whole rows");
  // Buffer s (0 or 1): A tile kBlockM x kWideDepth at tiles + s * kStage, then B tile
  // kWideDepth x kBlockN. The epilogue reuses the memory for the kBlockM x kBlockN results.
  const long batch = group.z;
  const long row0 = long(group.y) * kBlockM;
  const long column0 = long(group.x) * kBlockN;
  const device T* a_batch = a + batch * p.a_strides[0];
  const device T* b_batch = b + batch * p.b_strides[0];
  const uint simd_row = (simdgroup / GridColumns) * 32;
  const uint simd_column = (simdgroup % GridColumns) * 32;

  simdgroup_float8x8 accumulators[4][4];
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) accumulators[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }

  const long steps = (p.depth + kWideDepth - 1) / kWideDepth;
  for (long step = 0; step <= steps; ++step) {
    // Stage step `step` (if any) into buffer step % 2 while multiplying step - 1 from the other.
    if (step < steps) {
      threadgroup float* a_tile = tiles + (step % 2) * kStage;
      threadgroup float* b_tile = a_tile + kBlockM * kWideDepth;
      const long k0 = step * kWideDepth;
      // As in matmul_tiled: each thread steps rows of the tiles, its column fixed.
      const long a_k = k0 + thread_index % kWideDepth;
      for (uint r = thread_index / kWideDepth; r < kBlockM; r += kWideThreads / kWideDepth) {
        const long row = row0 + r;
        const bool inside = (aligned_blocks || row < p.rows) && (aligned_depth || a_k < p.depth);
        a_tile[r * kWideDepth + thread_index % kWideDepth] =
            inside ? float(a_batch[row * p.a_strides[1] + a_k * p.a_strides[2]]) : 0.0f;
      }
      const long b_column = column0 + thread_index % kBlockN;
      for (uint r = thread_index / kBlockN; r < kWideDepth; r += kWideThreads / kBlockN) {
        const long k = k0 + r;
        const bool inside = (aligned_depth || k < p.depth) && (aligned_blocks || b_column < p.columns);
        b_tile[r * kBlockN + thread_index % kBlockN] =
            inside ? float(b_batch[k * p.b_strides[1] + b_column * p.b_strides[2]]) : 0.0f;
      }
    }
    if (step > 0) {
      const threadgroup float* a_tile = tiles + ((step - 1) % 2) * kStage;
      const threadgroup float* b_tile = a_tile + kBlockM * kWideDepth;
      for (uint kk = 0; kk < kWideDepth; kk += 8) {
        simdgroup_float8x8 a_fragments[4];
        simdgroup_float8x8 b_fragments[4];
        for (uint i = 0; i < 4; ++i) {
          simdgroup_load(a_fragments[i], a_tile, kWideDepth, ulong2(kk, simd_row + 8 * i));
          simdgroup_load(b_fragments[i], b_tile, kBlockN, ulong2(simd_column + 8 * i, kk));
        }
        for (uint i = 0; i < 4; ++i) {
          for (uint j = 0; j < 4; ++j) {
            simdgroup_multiply_accumulate(accumulators[i][j], a_fragments[i], b_fragments[j], accumulators[i][j]);
          }
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  threadgroup float* results = tiles;
  for (uint i = 0; i < 4; ++i) {
    for (uint j = 0; j < 4; ++j) {
      simdgroup_store(accumulators[i][j], results, kBlockN, ulong2(simd_column + 8 * j, simd_row + 8 * i));
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = thread_index; i < kBlockM * kBlockN; i += kWideThreads) {
    const long row = row0 + i / kBlockN, column = column0 + i % kBlockN;
    if (aligned_blocks || (row < p.rows && column < p.columns)) {
      store_result(out, addend, p, batch, row, column, results[i]);
    }
  }
}

// The CPU device's shape of the tiled products (launch_shape() == cpu), written for a CPU core
// rather than a GPU: a thread computes an 8 x 32 strip of outputs in float registers, the
// outer-product form of a CPU matrix-multiply micro-kernel (per k, one row of 32 values of b
// times 8 values of a, one per output row). The CPU device compiles a strip, fully unrolled,
// into vector accumulators: with AVX-512, two 16-wide registers per row, 16 in all (8-wide
// AVX2 needs 32 and keeps some in memory). Each threadgroup
// of kPanelThreads threads computes 8 * kPanelThreads rows by 32 columns: per step of
// kPanelDepth along K the threads stage the step's 32-value rows of b in threadgroup memory as
// float (the accumulators' rows, contiguous), and each thread multiplies its rows of a (read
// where they lie, any strides) by them; its sums wait between steps in threadgroup memory.
// b is staged once per 8 * kPanelThreads rows of a. Every output sums its products in order of
// k from zero, as the other kernels do. The last strip of the matrix along each dimension is
// shifted back to end at its edge (the host requires M >= 8 and N >= 32), so every strip is
// whole; a thread stores only the outputs its unshifted strip owns, each exactly once.
constant constexpr uint kPanelRows = 8;
constant constexpr uint kPanelColumns = 32;
constant constexpr uint kPanelDepth = 64;
constant constexpr uint kPanelThreads = 16;

// First row (column) of the strip that starts at `start`, shifted back to end at `extent`.
inline long strip_origin(long start, long extent, uint width) { return min(start, extent - long(width)); }

// One step of a strip: its sums (from `sums_at`, 32 per row) plus a[row i, k] * b_panel[k][j]
// for k < depth, in order of k, back to `sums_at`. The loops over the strip are unrolled whole
// (the pragmas) and address rows through row pointers, so g++ keeps the sums in vector
// registers (a conditional first value, or an index that may wrap, makes it move them element
// by element).
template <typename T>
inline void multiply_strip(threadgroup float* sums_at, const device T* a_rows, long a_row_stride,
                           long a_depth_stride, const threadgroup float* b_panel, uint depth) {
  float sums[kPanelRows][kPanelColumns];
#pragma GCC unroll 8
  for (uint i = 0; i < kPanelRows; ++i) {
#pragma GCC unroll 32
    for (uint j = 0; j < kPanelColumns; ++j) sums[i][j] = (sums_at + i * kPanelColumns)[j];
  }
  for (uint k = 0; k < depth; ++k) {
    const device T* a_column = a_rows + long(k) * a_depth_stride;
    const threadgroup float* b_row = b_panel + k * kPanelColumns;
#pragma GCC unroll 8
    for (uint i = 0; i < kPanelRows; ++i) {
      const float x = float(a_column[i * a_row_stride]);
#pragma GCC unroll 32
      for (uint j = 0; j < kPanelColumns; ++j) sums[i][j] += x * b_row[j];
    }
  }
#pragma GCC unroll 8
  for (uint i = 0; i < kPanelRows; ++i) {
#pragma GCC unroll 32
    for (uint j = 0; j < kPanelColumns; ++j) (sums_at + i * kPanelColumns)[j] = sums[i][j];
  }
}

// Stages rows k < depth of b's 32 columns from `from` (b at the step's first row and the strip's
// first column) into `to`, [k][32] as float; thread t of kPanelThreads takes its share.
template <typename T>
inline void stage_panel(threadgroup float* to, const device T* from, constant MatmulParams& p, uint depth, uint t) {
  if (p.b_strides[2] == 1) {
    // Rows of b are contiguous: a thread copies whole rows.
    for (uint k = t; k < depth; k += kPanelThreads) {
      const device T* row = from + k * p.b_strides[1];
      threadgroup float* staged = to + k * kPanelColumns;
      for (uint j = 0; j < kPanelColumns; ++j) staged[j] = float(row[j]);
    }
    return;
  }
  // Columns of b (unit stride along K for x @ weight.t()): a thread walks two of them, four
  // values of each at a time where they are contiguous, and writes them 4 x 4 transposed.
  static_assert(kPanelColumns == 2 * kPanelThreads, "a thread stages two columns");
  const uint j = 2 * t;
  const device T* first = from + j * p.b_strides[2];
  const device T* second = first + p.b_strides[2];
  uint k = 0;
  if (p.b_strides[1] == 1) {
    for (; k + 4 <= depth; k += 4) {
      const float4 x = load_float4(first + k), y = load_float4(second + k);
      threadgroup float* staged = to + k * kPanelColumns + j;
      staged[0] = x.x, staged[1] = y.x;
      staged[kPanelColumns] = x.y, staged[kPanelColumns + 1] = y.y;
      staged[2 * kPanelColumns] = x.z, staged[2 * kPanelColumns + 1] = y.z;
      staged[3 * kPanelColumns] = x.w, staged[3 * kPanelColumns + 1] = y.w;
    }
  }
  for (; k < depth; ++k) {
    to[k * kPanelColumns + j] = float(first[k * p.b_strides[1]]);
    to[k * kPanelColumns + j + 1] = float(second[k * p.b_strides[1]]);
  }
}

template <typename T>
kernel void matmul_panels(device T* out [[buffer(0)]],
                          const device T* a [[buffer(1)]],
                          const device T* b [[buffer(2)]],
                          const device T* addend [[buffer(3)]],
                          constant MatmulParams& p [[buffer(4)]],
                          threadgroup float* tiles [[threadgroup(0)]],
                          uint3 group [[threadgroup_position_in_grid]],
                          uint thread_index [[thread_index_in_threadgroup]]) {
  // b's staged step, kPanelDepth x 32; then each thread's sums, 8 x 32.
  threadgroup float* b_panel = tiles;
  threadgroup float* sums = tiles + kPanelDepth * kPanelColumns + thread_index * kPanelRows * kPanelColumns;

  const long batch = group.z;
  const long owned_row = (long(group.y) * kPanelThreads + thread_index) * kPanelRows;
  const long row0 = strip_origin(owned_row, p.rows, kPanelRows);
  const long owned_column = long(group.x) * kPanelColumns;
  const long column0 = strip_origin(owned_column, p.columns, kPanelColumns);
  const device T* a_rows = a + batch * p.a_strides[0] + row0 * p.a_strides[1];
  const device T* b_columns = b + batch * p.b_strides[0] + column0 * p.b_strides[2];
  for (uint i = 0; i < kPanelRows * kPanelColumns; ++i) sums[i] = 0.0f;

  for (long k0 = 0; k0 < p.depth; k0 += kPanelDepth) {
    const uint depth = uint(min(long(kPanelDepth), p.depth - k0));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    stage_panel(b_panel, b_columns + k0 * p.b_strides[1], p, depth, thread_index);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (owned_row < p.rows) {
      multiply_strip(sums, a_rows + k0 * p.a_strides[2], p.a_strides[1], p.a_strides[2], b_panel, depth);
    }
  }
  if (owned_row >= p.rows) return;
  const uint first_column = uint(owned_column - column0);
  for (uint i = uint(owned_row - row0); i < kPanelRows; ++i) {
    const threadgroup float* row_sums = sums + i * kPanelColumns;
    if (p.has_addend || p.out_strides[2] != 1) {
      for (uint j = first_column; j < kPanelColumns; ++j) store_result(out, addend, p, batch, row0 + i, column0 + j, row_sums[j]);
      continue;
    }
    // What store_result computes, along a contiguous row of out.
    device T* out_row = out + batch * p.out_strides[0] + (row0 + i) * p.out_strides[1] + column0;
    for (uint j = first_column; j < kPanelColumns; ++j) out_row[j] = T(p.alpha * row_sums[j]);
  }
}

#define INSTANTIATE_MATMUL(T, SUFFIX)                                                             \
  template [[host_name("matmul_naive_" #SUFFIX)]] kernel void matmul_naive<T>(                    \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint3); \
  template [[host_name("matmul_rowdot_" #SUFFIX)]] kernel void matmul_rowdot<T>(                  \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint2,  \
      uint, uint);                                                                                \
  template [[host_name("matmul_vector_kdot_" #SUFFIX)]] kernel void matmul_vector_kdot<T>(        \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint2,  \
      uint, uint, uint);                                                                          \
  template [[host_name("matmul_vector_columns_" #SUFFIX)]] kernel void matmul_vector_columns<T>(  \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint2,  \
      uint, uint, uint);                                                                          \
  template [[host_name("matmul_few_rows_" #SUFFIX)]] kernel void matmul_few_rows<T, 64, 64>(    \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint2,  \
      uint);                                                                                      \
  template [[host_name("matmul_few_rows_wide_" #SUFFIX)]] kernel void matmul_few_rows<T, 128, 32>( \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint2,  \
      uint);                                                                                      \
  template [[host_name("matmul_gemv_kdot_" #SUFFIX)]] kernel void matmul_gemv_kdot<T>(            \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint3); \
  template [[host_name("matmul_gemv_columns_" #SUFFIX)]] kernel void matmul_gemv_columns<T>(      \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&, uint3); \
  template [[host_name("matmul_tiled32_" #SUFFIX)]] kernel void matmul_tiled<T, 2, 2>(            \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&,        \
      threadgroup float*, uint3, uint, uint);                                                     \
  template [[host_name("matmul_tiled64_" #SUFFIX)]] kernel void matmul_tiled<T, 4, 4>(            \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&,        \
      threadgroup float*, uint3, uint, uint);                                                     \
  template [[host_name("matmul_tiled128x64_" #SUFFIX)]] kernel void matmul_tiled_wide<T, 4, 2>(   \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&,        \
      threadgroup float*, uint3, uint, uint);                                                     \
  template [[host_name("matmul_tiled64x128_" #SUFFIX)]] kernel void matmul_tiled_wide<T, 2, 4>(   \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&,        \
      threadgroup float*, uint3, uint, uint);                                                    \
  template [[host_name("matmul_panels_" #SUFFIX)]] kernel void matmul_panels<T>(                  \
      device T*, const device T*, const device T*, const device T*, constant MatmulParams&,        \
      threadgroup float*, uint3, uint);

INSTANTIATE_MATMUL(float, float)
INSTANTIATE_MATMUL(half, half)
INSTANTIATE_MATMUL(bfloat, bfloat)
