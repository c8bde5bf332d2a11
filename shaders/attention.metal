// Scaled dot-product attention (ATen's _scaled_dot_product_attention_math_for_mps):
//   out = softmax(scale * q k^T + mask) v,   weights = softmax(scale * q k^T + mask)
// in two dispatches, shaped so that every element of q, k and v is loaded from device memory
// once per threadgroup that needs it:
//   sdpa_block   one two-simdgroup threadgroup per (key split, block of query rows,
//                key/value head): up to SLOTS query rows of the heads that share the
//                key/value head (64, 48, 24 at head dims 64, 128, 256: each group re-reads
//                the keys and values, so more slots read them fewer times). Per block of p.block_keys keys, each key row is loaded by one
//                thread and scored against every slot; an online softmax per slot
//                rescales the running sums; each thread then owns value columns and loads each
//                value element once. Writes each probability exp(score - running max) once,
//                in the query's dtype, into the weights, with the running max per (row, key
//                block); per (row, split) the running max, sum of exponentials and
//                unnormalised output row; with a single split (prefill), the output row
//                itself and the row's log-sum-exp instead.
//   sdpa_finish  one threadgroup per query row: merges the splits into the output (with more
//                than one), writes the row's log-sum-exp (-inf for a fully masked row) and
//                rescales the stored probabilities in place into the weights
//                exp(score - log_sum_exp).
// Splitting the keys gives decode (one query row, thousands of keys) as many threadgroups as
// prefill. A fully masked row (every score -inf) has output 0 and weights 0.
//
// Tensors may have any strides. Up to four leading batch dimensions are decomposed here;
// the host pads missing ones with size 1 and stride 0. Masks are bound with the strides of
// their broadcast to [batch..., heads, rows, keys] (0 along broadcast dimensions).
#include <metal_stdlib>
using namespace metal;

#include "params/attention.h"

constant constexpr uint kBatchDims = kSdpaBatchDims;
constant constexpr uint kBlockThreads = kSdpaBlockThreads;
constant constexpr uint kQueryFloats = kSdpaQueryFloats;
constant constexpr uint kTileScores = kSdpaTileScores;
constant constexpr uint kSlotRun = 8;         // slots scored together: a vector of floats
constant constexpr uint kFinishThreads = kSdpaFinishThreads;
constant constexpr uint kMaxSplits = kSdpaMaxSplits;

enum MaskKind : int { kNoMask = 0, kBoolMask = 1, kAdditiveMask = 2 };

struct SdpaPosition {
  long q;
  long k;
  long v;
  long mask;
};

// Element offsets of (batch, head, row) in q, k/v (head shared by its group) and the mask.
inline SdpaPosition sdpa_position(constant SdpaParams& p, uint batch_head, uint row) {
  const uint head = batch_head % p.heads;
  uint batch = batch_head / p.heads;
  const uint kv_head = head / p.kv_group;
  SdpaPosition at;
  at.q = long(head) * p.q.head + long(row) * p.q.row;
  at.k = long(kv_head) * p.k.head;
  at.v = long(kv_head) * p.v.head;
  at.mask = long(head) * p.mask.head + long(row) * p.mask.row;
  for (int d = int(kBatchDims) - 1; d >= 0; --d) {
    const uint coordinate = batch % p.batch_sizes[d];
    batch /= p.batch_sizes[d];
    at.q += long(coordinate) * p.q.batch[d];
    at.k += long(coordinate) * p.k.batch[d];
    at.v += long(coordinate) * p.v.batch[d];
    at.mask += long(coordinate) * p.mask.batch[d];
  }
  return at;
}

// Whether a boolean mask lets the row see `key` (always, for other masks).
template <typename M, int MASK>
inline bool sdpa_key_visible(device const M* mask, long mask_at, long key_stride, uint key) {
  return MASK != kBoolMask || bool(mask[mask_at + long(key) * key_stride]);
}

// The additive mask's term for `key` (0 for other masks); -inf excludes the key.
template <typename M, int MASK>
inline float sdpa_mask_bias(device const M* mask, long mask_at, long key_stride, uint key) {
  return MASK == kAdditiveMask ? float(mask[mask_at + long(key) * key_stride]) : 0.0f;
}

// The (query row, head) slots of an sdpa_block group: as many query rows as kQueryFloats hold,
// at most one per thread (64, 48, 24 at head dims 64, 128, 256). Must match slots_for in
// native/ops/attention.cpp.
template <uint MAX_DIM>
constexpr uint sdpa_slots() {
  return kQueryFloats / MAX_DIM < kBlockThreads ? kQueryFloats / MAX_DIM : kBlockThreads;
}

template <typename T, typename M, int MASK, uint MAX_DIM>
kernel void sdpa_block(device const T* q [[buffer(0)]],
                       device const T* k [[buffer(1)]],
                       device const T* v [[buffer(2)]],
                       device const M* mask [[buffer(3)]],
                       device T* weights [[buffer(4)]],
                       device float* partial [[buffer(5)]],
                       constant SdpaParams& p [[buffer(6)]],
                       device T* out [[buffer(7)]],
                       device float* block_max [[buffer(8)]],
                       uint3 group_id [[threadgroup_position_in_grid]],
                       uint t [[thread_index_in_threadgroup]]) {
  constexpr uint SLOTS = sdpa_slots<MAX_DIM>();
  // Scaled query rows of the slots, dimension-major: a key element meets every slot's query
  // element in one contiguous run.
  threadgroup float query[MAX_DIM * SLOTS];
  threadgroup float tile[kTileScores];    // scores, then probabilities, of a key block
  threadgroup float slot_max[SLOTS];
  threadgroup float slot_sum[SLOTS];
  threadgroup float slot_rescale[SLOTS];
  threadgroup long slot_query[SLOTS];  // element offset of the slot's query row
  threadgroup long slot_mask[SLOTS];   // element offset of the slot's mask row
  threadgroup uint slot_row[SLOTS];    // query row, or p.rows for an empty slot
  threadgroup ulong slot_index[SLOTS]; // batch_head * rows + row
  constexpr uint kSlotBytes = 3 * sizeof(float) + 2 * sizeof(long) + sizeof(uint) + sizeof(ulong);
  static_assert(SLOTS % kSlotRun == 0, "sdpa_block scores slots in runs");
  static_assert(SLOTS * MAX_DIM * sizeof(float) + kTileScores * sizeof(float) + SLOTS * kSlotBytes <= 32768,
                "sdpa_block's threadgroup memory exceeds 32 KB");

  const uint split = group_id.x, row_block = group_id.y;
  const uint member_blocks = (p.kv_group + p.block_heads - 1) / p.block_heads;
  const uint member_block = group_id.z % member_blocks;
  const uint kv_index = group_id.z / member_blocks;  // batch * kv_heads + kv_head
  const uint kv_heads = p.heads / p.kv_group;
  const uint slots = p.block_heads * p.block_rows;
  const uint block_keys = p.block_keys;  // block_keys * slots <= kTileScores
  const uint key_blocks = (p.keys + block_keys - 1) / block_keys;

  if (t < slots) {
    const uint member = member_block * p.block_heads + t % p.block_heads;
    const uint row = row_block * p.block_rows + t / p.block_heads;
    const bool used = member < p.kv_group && row < p.rows;
    const uint batch_head = (kv_index / kv_heads) * p.heads + (kv_index % kv_heads) * p.kv_group + member;
    const SdpaPosition at = sdpa_position(p, used ? batch_head : 0, used ? row : 0);
    slot_query[t] = at.q;
    slot_mask[t] = at.mask;
    slot_row[t] = used ? row : p.rows;
    slot_index[t] = ulong(batch_head) * p.rows + row;
    slot_max[t] = -INFINITY;
    slot_sum[t] = 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Scored in runs of kSlotRun slots; the slots past `slots` in the last run hold zeros (their
  // dots are never read, but stay finite).
  const uint run_slots = (slots + kSlotRun - 1) / kSlotRun * kSlotRun;
  for (uint i = t; i < run_slots * p.head_dim; i += kBlockThreads) {
    const uint slot = i / p.head_dim, d = i % p.head_dim;
    query[d * SLOTS + slot] =
        slot < slots && slot_row[slot] < p.rows ? float(q[slot_query[slot] + long(d) * p.q.column]) * p.scale : 0.0f;
  }
  // Key and value rows of this group's key/value head (the first slot's head shares them).
  const uint first_head = (kv_index / kv_heads) * p.heads + (kv_index % kv_heads) * p.kv_group;
  const SdpaPosition kv = sdpa_position(p, first_head, 0);

  // This split's keys (it starts on a key block); with a causal mask none past the group's
  // last row.
  const uint begin = split * p.split_length;
  uint end = min(begin + p.split_length, p.keys);
  if (p.causal) end = min(end, min(row_block * p.block_rows + p.block_rows, p.rows));

  // Value columns this thread accumulates: a run of kColumns from t * kColumns.
  constexpr uint kColumns = MAX_DIM / kBlockThreads;
  float accumulator[kColumns][SLOTS];
  for (uint c = 0; c < kColumns; ++c)
    for (uint s = 0; s < SLOTS; ++s) accumulator[c][s] = 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);

  for (uint block = begin; block < end; block += block_keys) {
    const uint count = min(block_keys, end - block);
    // Scores: this thread's keys against every slot; each key row is loaded once.
    for (uint j = t; j < count; j += kBlockThreads) {
      const uint key = block + j;
      float dot[SLOTS];
      for (uint s = 0; s < run_slots; ++s) dot[s] = 0.0f;
      device const T* key_row = k + kv.k + long(key) * p.k.row;
      for (uint d = 0; d < p.head_dim; ++d) {
        const float element = float(key_row[long(d) * p.k.column]);
        threadgroup const float* query_column = query + d * SLOTS;
        for (uint run = 0; run < run_slots; run += kSlotRun)
          for (uint s = run; s < run + kSlotRun; ++s) dot[s] += query_column[s] * element;
      }
      threadgroup float* key_scores = tile + j * slots;
      for (uint s = 0; s < slots; ++s) {
        const uint row = slot_row[s];
        float score = -INFINITY;
        if (row < p.rows && !(p.causal && key > row) &&
            sdpa_key_visible<M, MASK>(mask, slot_mask[s], p.mask.column, key)) {
          score = dot[s] + sdpa_mask_bias<M, MASK>(mask, slot_mask[s], p.mask.column, key);
        }
        key_scores[s] = score;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < slots) {
      float block_max_score = -INFINITY;
      for (uint j = 0; j < count; ++j) block_max_score = max(block_max_score, tile[j * slots + t]);
      const float new_max = max(slot_max[t], block_max_score);
      // exp(-inf) = 0 rescales nothing-yet; a slot with no visible key so far stays at 1.
      slot_rescale[t] = new_max == -INFINITY ? 1.0f : exp(slot_max[t] - new_max);
      slot_max[t] = new_max;
      // The maximum this block's stored probabilities are relative to (sdpa_finish reads it
      // for blocks that hold a key the row sees).
      if (slot_row[t] < p.rows && !(p.causal && block > slot_row[t]))
        block_max[slot_index[t] * key_blocks + block / block_keys] = new_max;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // Probabilities relative to the running maximum; stored in the weights (in the query's
    // dtype: they lie in [0, 1]) for the keys the row sees, for sdpa_finish to rescale.
    for (uint j = t; j < count; j += kBlockThreads) {
      const uint key = block + j;
      threadgroup float* key_scores = tile + j * slots;
      for (uint s = 0; s < slots; ++s) {
        const float score = key_scores[s];
        const float probability = score == -INFINITY ? 0.0f : exp(score - slot_max[s]);
        key_scores[s] = probability;
        const uint row = slot_row[s];
        if (row < p.rows && !(p.causal && key > row)) weights[slot_index[s] * p.keys + key] = T(probability);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < slots) {
      float block_sum = 0.0f;
      for (uint j = 0; j < count; ++j) block_sum += tile[j * slots + t];
      slot_sum[t] = slot_sum[t] * slot_rescale[t] + block_sum;
    }
    // Values: each thread owns its columns, so each value element is loaded once.
    const uint columns = min(kColumns, p.value_dim - min(p.value_dim, t * kColumns));
    for (uint c = 0; c < columns; ++c)
      for (uint s = 0; s < slots; ++s) accumulator[c][s] *= slot_rescale[s];
    device const T* value_run = v + kv.v + long(block) * p.v.row + long(t * kColumns) * p.v.column;
    for (uint j = 0; j < count; ++j) {
      threadgroup const float* key_probabilities = tile + j * slots;
      for (uint c = 0; c < columns; ++c) {
        const float element = float(value_run[long(j) * p.v.row + long(c) * p.v.column]);
        for (uint s = 0; s < slots; ++s) accumulator[c][s] += key_probabilities[s] * element;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }

  if (p.splits == 1) {
    // The row is complete: its output, and its log-sum-exp for sdpa_finish's weights (a
    // fully masked row: output 0, -inf).
    for (uint s = 0; s < slots; ++s) {
      if (slot_row[s] >= p.rows) continue;
      const float sum = slot_sum[s];
      const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
      if (t == 0) partial[slot_index[s]] = sum > 0.0f ? slot_max[s] + log(sum) : -INFINITY;
      for (uint c = 0; c < kColumns; ++c) {
        const uint column = t * kColumns + c;
        if (column < p.value_dim) out[slot_index[s] * p.value_dim + column] = T(accumulator[c][s] * inverse);
      }
    }
    return;
  }
  // Record of (row, split): [max, sum, accumulator[value_dim]].
  const uint record_length = p.value_dim + 2;
  for (uint s = 0; s < slots; ++s) {
    if (slot_row[s] >= p.rows) continue;
    device float* record = partial + (slot_index[s] * p.splits + split) * record_length;
    if (t == 0) {
      record[0] = slot_max[s];
      record[1] = slot_sum[s];
    }
    for (uint c = 0; c < kColumns; ++c) {
      const uint column = t * kColumns + c;
      if (column < p.value_dim) record[2 + column] = accumulator[c][s];
    }
  }
}

template <typename T>
kernel void sdpa_finish(device const float* partial [[buffer(0)]],
                        device const float* block_max [[buffer(1)]],
                        device T* out [[buffer(2)]],
                        device T* weights [[buffer(3)]],
                        constant SdpaParams& p [[buffer(4)]],
                        device float* log_sum_exp [[buffer(5)]],
                        uint3 group_id [[threadgroup_position_in_grid]],
                        uint t [[thread_index_in_threadgroup]]) {
  threadgroup float split_factor[kMaxSplits];  // exp(max_s - row max) / total, per split
  threadgroup float chunk_max[kFinishThreads];  // block maxima of a run of key blocks
  threadgroup float row_log_sum_exp;
  const uint row = group_id.x;
  const ulong row_index = ulong(group_id.y) * p.rows + row;
  const uint record_length = p.value_dim + 2;
  device const float* records = partial + row_index * p.splits * record_length;
  // A single split: sdpa_block wrote the output and the log-sum-exp.
  if (p.splits == 1 && t == 0) row_log_sum_exp = partial[row_index];
  if (p.splits > 1 && t == 0) {
    float row_max = -INFINITY;
    for (uint s = 0; s < p.splits; ++s) row_max = max(row_max, records[s * record_length]);
    float total = 0.0f;
    for (uint s = 0; s < p.splits; ++s) {
      const float split_max = records[s * record_length];
      split_factor[s] = split_max == -INFINITY ? 0.0f : exp(split_max - row_max);
      if (split_max != -INFINITY) total += records[s * record_length + 1] * split_factor[s];
    }
    for (uint s = 0; s < p.splits; ++s) split_factor[s] = total > 0.0f ? split_factor[s] / total : 0.0f;
    row_log_sum_exp = total > 0.0f ? row_max + log(total) : -INFINITY;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) log_sum_exp[row_index] = row_log_sum_exp;
  for (uint column = t; p.splits > 1 && column < p.value_dim; column += kFinishThreads) {
    float value = 0.0f;
    for (uint s = 0; s < p.splits; ++s) {
      if (split_factor[s] != 0.0f) value += records[s * record_length + 2 + column] * split_factor[s];
    }
    out[row_index * p.value_dim + column] = T(value);
  }
  // weight = stored probability * exp(block max - log_sum_exp), the block maxima staged a run
  // at a time so that each is loaded once. Keys past the causal limit, and every key of a
  // fully masked row, get weight 0.
  const float lse = row_log_sum_exp;
  const uint visible = lse == -INFINITY ? 0 : (p.causal ? min(row + 1, p.keys) : p.keys);
  const uint block_keys = p.block_keys;
  const uint visible_blocks = (visible + block_keys - 1) / block_keys;
  device T* row_weights = weights + row_index * p.keys;
  device const float* row_block_max = block_max + row_index * ((p.keys + block_keys - 1) / block_keys);
  for (uint first = 0; first < visible_blocks; first += kFinishThreads) {
    const uint count = min(kFinishThreads, visible_blocks - first);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t < count) chunk_max[t] = row_block_max[first + t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint chunk_begin = first * block_keys, chunk_end = min(chunk_begin + count * block_keys, visible);
    for (uint key = chunk_begin + t; key < chunk_end; key += kFinishThreads) {
      const float maximum = chunk_max[(key - chunk_begin) / block_keys];
      row_weights[key] = T(maximum == -INFINITY ? 0.0f : float(row_weights[key]) * exp(maximum - lse));
    }
  }
  for (uint key = visible + t; key < p.keys; key += kFinishThreads) row_weights[key] = T(0.0f);
}

#define SDPA_BLOCK(T, TN, M, MN, MASK, DIM)                                         \
  template [[host_name("sdpa_block_" #TN "_" #MN "_" #DIM)]] [[kernel]]              \
  decltype(sdpa_block<T, M, MASK, DIM>) sdpa_block<T, M, MASK, DIM>;

#define SDPA_MASKED(T, TN, M, MN, MASK)                                              \
  SDPA_BLOCK(T, TN, M, MN, MASK, 64)                                                 \
  SDPA_BLOCK(T, TN, M, MN, MASK, 128)                                                \
  SDPA_BLOCK(T, TN, M, MN, MASK, 256)

// Per query dtype: no mask, a boolean mask, an additive mask of the query's dtype, and
// (for half and bfloat queries) an additive float32 mask.
#define SDPA_DTYPE(T, TN)                                                            \
  SDPA_MASKED(T, TN, bool, none, kNoMask)                                            \
  SDPA_MASKED(T, TN, bool, bool, kBoolMask)                                          \
  SDPA_MASKED(T, TN, T, TN, kAdditiveMask)                                           \
  template [[host_name("sdpa_finish_" #TN)]] [[kernel]]                              \
  decltype(sdpa_finish<T>) sdpa_finish<T>;

SDPA_DTYPE(float, float)
SDPA_DTYPE(half, half)
SDPA_DTYPE(bfloat, bfloat)
SDPA_MASKED(half, half, float, float, kAdditiveMask)
SDPA_MASKED(bfloat, bfloat, float, float, kAdditiveMask)
