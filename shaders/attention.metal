// Scaled dot-product attention (ATen's _scaled_dot_product_attention_math_for_mps):
//   out = softmax(scale * q k^T + mask) v,   weights = softmax(scale * q k^T + mask)
// in three dispatches that need no threadgroup cooperation:
//   sdpa_partial  one thread per (key split, query row, batch*head): a numerically stable
//                 online softmax over its split of the keys, in float32; writes the split's
//                 running max, sum of exponentials and unnormalised output row.
//   sdpa_combine  one thread per (output column, query row, batch*head): merges the splits
//                 of its row, writes the output and the row's log-sum-exp.
//   sdpa_weights  one thread per (key, query row, batch*head): exp(score - log-sum-exp).
// Splitting the keys gives decode (one query row, thousands of keys) as many threads as
// prefill. A fully masked row (every score -inf) has output 0 and weights 0.
//
// Tensors may have any strides. Up to four leading batch dimensions are decomposed here;
// the host pads missing ones with size 1 and stride 0. Masks are bound with the strides of
// their broadcast to [batch..., heads, rows, keys] (0 along broadcast dimensions).
#include <metal_stdlib>
using namespace metal;

constant constexpr uint kBatchDims = 4;

// Strides in elements of one tensor: four batch dimensions, then head, row (sequence) and
// column (head dimension, or key for the mask).
struct SdpaStrides {
  long batch[kBatchDims];
  long head;
  long row;
  long column;
};

// Must match etm::ops::SdpaParams (native/ops/attention.cpp).
struct SdpaParams {
  SdpaStrides q;
  SdpaStrides k;
  SdpaStrides v;
  SdpaStrides mask;
  uint batch_sizes[kBatchDims];
  uint heads;          // query heads
  uint kv_group;       // query heads per key/value head
  uint rows;           // query length
  uint keys;           // key/value length
  uint head_dim;       // of query and key
  uint value_dim;      // of value and output
  uint splits;         // key splits per row
  uint split_length;   // keys per split
  uint causal;         // key j is visible from row i iff j <= i
  float scale;
};

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

// The scaled, masked score of one key; -INFINITY when the key is masked out.
template <typename M, int MASK>
inline float sdpa_mask_score(float score, device const M* mask, long mask_at, long key_stride,
                             uint key) {
  if (MASK == kBoolMask) {
    return bool(mask[mask_at + long(key) * key_stride]) ? score : -INFINITY;
  }
  if (MASK == kAdditiveMask) {
    return score + float(mask[mask_at + long(key) * key_stride]);
  }
  return score;
}

template <typename T, typename M, int MASK, uint MAX_DIM>
kernel void sdpa_partial(device const T* q [[buffer(0)]],
                         device const T* k [[buffer(1)]],
                         device const T* v [[buffer(2)]],
                         device const M* mask [[buffer(3)]],
                         device float* partial [[buffer(4)]],
                         constant SdpaParams& p [[buffer(5)]],
                         uint3 position [[thread_position_in_grid]],
                         uint3 grid [[threads_per_grid]]) {
  const uint split = position.x, row = position.y, batch_head = position.z;
  if (split >= p.splits || row >= p.rows || batch_head >= grid.z) return;
  const SdpaPosition at = sdpa_position(p, batch_head, row);

  float query[MAX_DIM];
  for (uint d = 0; d < p.head_dim; ++d) query[d] = float(q[at.q + long(d) * p.q.column]) * p.scale;
  float accumulator[MAX_DIM];
  for (uint d = 0; d < p.value_dim; ++d) accumulator[d] = 0.0f;

  const uint begin = split * p.split_length;
  uint end = min(begin + p.split_length, p.keys);
  if (p.causal) end = min(end, row + 1);

  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (uint key = begin; key < end; ++key) {
    const long k_at = at.k + long(key) * p.k.row;
    float score = 0.0f;
    if (p.k.column == 1) {
      for (uint d = 0; d < p.head_dim; ++d) score += query[d] * float(k[k_at + d]);
    } else {
      for (uint d = 0; d < p.head_dim; ++d) score += query[d] * float(k[k_at + long(d) * p.k.column]);
    }
    score = sdpa_mask_score<M, MASK>(score, mask, at.mask, p.mask.column, key);
    if (score == -INFINITY) continue;
    if (score > running_max) {
      // Rescale what was summed against the old maximum (exp(-inf) = 0 on the first key).
      const float correction = exp(running_max - score);
      running_sum *= correction;
      for (uint d = 0; d < p.value_dim; ++d) accumulator[d] *= correction;
      running_max = score;
    }
    const float weight = exp(score - running_max);
    running_sum += weight;
    const long v_at = at.v + long(key) * p.v.row;
    if (p.v.column == 1) {
      for (uint d = 0; d < p.value_dim; ++d) accumulator[d] += weight * float(v[v_at + d]);
    } else {
      for (uint d = 0; d < p.value_dim; ++d) accumulator[d] += weight * float(v[v_at + long(d) * p.v.column]);
    }
  }

  // Record layout: [max, sum, accumulator[value_dim]].
  device float* record =
      partial + ((ulong(batch_head) * p.rows + row) * p.splits + split) * (p.value_dim + 2);
  record[0] = running_max;
  record[1] = running_sum;
  for (uint d = 0; d < p.value_dim; ++d) record[2 + d] = accumulator[d];
}

template <typename T>
kernel void sdpa_combine(device const float* partial [[buffer(0)]],
                         device T* out [[buffer(1)]],
                         device float* log_sum_exp [[buffer(2)]],
                         constant SdpaParams& p [[buffer(3)]],
                         uint3 position [[thread_position_in_grid]],
                         uint3 grid [[threads_per_grid]]) {
  const uint column = position.x, row = position.y, batch_head = position.z;
  if (column >= p.value_dim || row >= p.rows || batch_head >= grid.z) return;
  const ulong row_index = ulong(batch_head) * p.rows + row;
  const uint record_length = p.value_dim + 2;
  device const float* records = partial + row_index * p.splits * record_length;

  float row_max = -INFINITY;
  for (uint s = 0; s < p.splits; ++s) row_max = max(row_max, records[s * record_length]);
  float total = 0.0f;
  float value = 0.0f;
  if (row_max != -INFINITY) {
    for (uint s = 0; s < p.splits; ++s) {
      device const float* record = records + s * record_length;
      if (record[0] == -INFINITY) continue;  // a split whose keys were all masked
      const float factor = exp(record[0] - row_max);
      total += record[1] * factor;
      value += record[2 + column] * factor;
    }
  }
  out[row_index * p.value_dim + column] = T(total > 0.0f ? value / total : 0.0f);
  if (column == 0) log_sum_exp[row_index] = total > 0.0f ? row_max + log(total) : -INFINITY;
}

template <typename T, typename M, int MASK>
kernel void sdpa_weights(device const T* q [[buffer(0)]],
                         device const T* k [[buffer(1)]],
                         device const M* mask [[buffer(2)]],
                         device const float* log_sum_exp [[buffer(3)]],
                         device T* weights [[buffer(4)]],
                         constant SdpaParams& p [[buffer(5)]],
                         uint3 position [[thread_position_in_grid]],
                         uint3 grid [[threads_per_grid]]) {
  const uint key = position.x, row = position.y, batch_head = position.z;
  if (key >= p.keys || row >= p.rows || batch_head >= grid.z) return;
  const ulong row_index = ulong(batch_head) * p.rows + row;
  const float row_lse = log_sum_exp[row_index];
  float weight = 0.0f;
  if (row_lse != -INFINITY && !(p.causal && key > row)) {
    const SdpaPosition at = sdpa_position(p, batch_head, row);
    const long k_at = at.k + long(key) * p.k.row;
    float score = 0.0f;
    for (uint d = 0; d < p.head_dim; ++d) {
      score += float(q[at.q + long(d) * p.q.column]) * p.scale * float(k[k_at + long(d) * p.k.column]);
    }
    score = sdpa_mask_score<M, MASK>(score, mask, at.mask, p.mask.column, key);
    if (score != -INFINITY) weight = exp(score - row_lse);
  }
  weights[row_index * p.keys + key] = T(weight);
}

#define SDPA_PARTIAL(T, TN, M, MN, MASK, DIM)                                       \
  template [[host_name("sdpa_partial_" #TN "_" #MN "_" #DIM)]] [[kernel]]            \
  decltype(sdpa_partial<T, M, MASK, DIM>) sdpa_partial<T, M, MASK, DIM>;

#define SDPA_MASKED(T, TN, M, MN, MASK)                                              \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 64)                                               \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 128)                                              \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 256)                                              \
  template [[host_name("sdpa_weights_" #TN "_" #MN)]] [[kernel]]                     \
  decltype(sdpa_weights<T, M, MASK>) sdpa_weights<T, M, MASK>;

// Per query dtype: no mask, a boolean mask, an additive mask of the query's dtype, and
// (for half and bfloat queries) an additive float32 mask.
#define SDPA_DTYPE(T, TN)                                                            \
  SDPA_MASKED(T, TN, bool, none, kNoMask)                                            \
  SDPA_MASKED(T, TN, bool, bool, kBoolMask)                                          \
  SDPA_MASKED(T, TN, T, TN, kAdditiveMask)                                           \
  template [[host_name("sdpa_combine_" #TN)]] [[kernel]]                             \
  decltype(sdpa_combine<T>) sdpa_combine<T>;

SDPA_DTYPE(float, float)
SDPA_DTYPE(half, half)
SDPA_DTYPE(bfloat, bfloat)
SDPA_MASKED(half, half, float, float, kAdditiveMask)
SDPA_MASKED(bfloat, bfloat, float, float, kAdditiveMask)
