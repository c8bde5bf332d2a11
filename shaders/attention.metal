// Scaled dot-product attention (ATen's _scaled_dot_product_attention_math_for_mps):
//   out = softmax(scale * q k^T + mask) v,   weights = softmax(scale * q k^T + mask)
// in three dispatches that need no threadgroup cooperation:
//   sdpa_partial  one thread per (query head of a key/value group, key split, query row of a
//                 key/value head), so the heads that share keys read them together; a numerically stable
//                 online softmax over its split of the keys, in float32; writes the split's
//                 running max, sum of exponentials and unnormalised output row.
//   sdpa_combine  one thread per (output column, query row, batch*head): merges the splits
//                 of its row, writes the output and the row's log-sum-exp.
//   sdpa_weights  one thread per (block of keys, query row, batch*head): exp(score - lse).
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
  uint weight_keys;    // keys per sdpa_weights thread
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

// Dot product of a float row with `count` elements of `row` (stride 1 when `stride` is 1).
// Four partial sums break the dependency chain of one running sum.
template <typename T>
inline float sdpa_dot(thread const float* left, device const T* row, long stride, uint count) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  uint d = 0;
  if (stride == 1) {
    for (; d + 4 <= count; d += 4) {
      s0 += left[d] * float(row[d]);
      s1 += left[d + 1] * float(row[d + 1]);
      s2 += left[d + 2] * float(row[d + 2]);
      s3 += left[d + 3] * float(row[d + 3]);
    }
    for (; d < count; ++d) s0 += left[d] * float(row[d]);
  } else {
    for (; d < count; ++d) s0 += left[d] * float(row[long(d) * stride]);
  }
  return (s0 + s1) + (s2 + s3);
}

// accumulator += weight * row, over `count` elements of `row` (stride 1 when `stride` is 1).
template <typename T>
inline void sdpa_accumulate(thread float* accumulator, float weight, device const T* row, long stride,
                            uint count) {
  uint d = 0;
  if (stride == 1) {
    // Four independent lanes per step: compilers turn them into one vector operation.
    for (; d + 4 <= count; d += 4) {
      accumulator[d] += weight * float(row[d]);
      accumulator[d + 1] += weight * float(row[d + 1]);
      accumulator[d + 2] += weight * float(row[d + 2]);
      accumulator[d + 3] += weight * float(row[d + 3]);
    }
    for (; d < count; ++d) accumulator[d] += weight * float(row[d]);
  } else {
    for (; d < count; ++d) accumulator[d] += weight * float(row[long(d) * stride]);
  }
}

// Whether a boolean mask lets the row see `key` (always, for other masks). Masked keys are
// skipped before any arithmetic, so they need no infinities.
template <typename M, int MASK>
inline bool sdpa_key_visible(device const M* mask, long mask_at, long key_stride, uint key) {
  return MASK != kBoolMask || bool(mask[mask_at + long(key) * key_stride]);
}

// The additive mask's term for `key` (0 for other masks); -inf excludes the key.
template <typename M, int MASK>
inline float sdpa_mask_bias(device const M* mask, long mask_at, long key_stride, uint key) {
  return MASK == kAdditiveMask ? float(mask[mask_at + long(key) * key_stride]) : 0.0f;
}

template <typename T, typename M, int MASK, uint MAX_DIM>
kernel void sdpa_partial(device const T* q [[buffer(0)]],
                         device const T* k [[buffer(1)]],
                         device const T* v [[buffer(2)]],
                         device const M* mask [[buffer(3)]],
                         device float* partial [[buffer(4)]],
                         constant SdpaParams& p [[buffer(5)]],
                         uint3 position [[thread_position_in_grid]]) {
  // x: query head within its key/value group, y: key split, z: query row of one key/value
  // head. Neighbouring threads read the same keys and values, once from memory.
  const uint member = position.x, split = position.y;
  if (member >= p.kv_group || split >= p.splits) return;
  const uint row = position.z % p.rows;
  const uint kv_index = position.z / p.rows;  // batch * kv_heads + kv_head
  const uint kv_heads = p.heads / p.kv_group;
  const uint batch_head = (kv_index / kv_heads) * p.heads + (kv_index % kv_heads) * p.kv_group + member;
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
    if (!sdpa_key_visible<M, MASK>(mask, at.mask, p.mask.column, key)) continue;
    const float score = sdpa_dot(query, k + at.k + long(key) * p.k.row, p.k.column, p.head_dim) +
                        sdpa_mask_bias<M, MASK>(mask, at.mask, p.mask.column, key);
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
    sdpa_accumulate(accumulator, weight, v + at.v + long(key) * p.v.row, p.v.column, p.value_dim);
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

template <typename T, typename M, int MASK, uint MAX_DIM>
kernel void sdpa_weights(device const T* q [[buffer(0)]],
                         device const T* k [[buffer(1)]],
                         device const M* mask [[buffer(2)]],
                         device const float* log_sum_exp [[buffer(3)]],
                         device T* weights [[buffer(4)]],
                         constant SdpaParams& p [[buffer(5)]],
                         uint3 position [[thread_position_in_grid]],
                         uint3 grid [[threads_per_grid]]) {
  const uint block = position.x, row = position.y, batch_head = position.z;
  const uint begin = block * p.weight_keys;
  if (begin >= p.keys || row >= p.rows || batch_head >= grid.z) return;
  const ulong row_index = ulong(batch_head) * p.rows + row;
  device T* row_weights = weights + row_index * p.keys;
  const uint end = min(begin + p.weight_keys, p.keys);
  const float row_lse = log_sum_exp[row_index];
  // Keys past the causal limit, and every key of a fully masked row, get weight 0.
  const uint visible_end = row_lse == -INFINITY ? begin : (p.causal ? clamp(row + 1, begin, end) : end);
  if (visible_end > begin) {
    const SdpaPosition at = sdpa_position(p, batch_head, row);
    float query[MAX_DIM];
    for (uint d = 0; d < p.head_dim; ++d) query[d] = float(q[at.q + long(d) * p.q.column]) * p.scale;
    for (uint key = begin; key < visible_end; ++key) {
      float weight = 0.0f;
      if (sdpa_key_visible<M, MASK>(mask, at.mask, p.mask.column, key)) {
        const float score = sdpa_dot(query, k + at.k + long(key) * p.k.row, p.k.column, p.head_dim) +
                            sdpa_mask_bias<M, MASK>(mask, at.mask, p.mask.column, key);
        weight = exp(score - row_lse);  // exp(-inf) = 0 for keys an additive mask excludes
      }
      row_weights[key] = T(weight);
    }
  }
  for (uint key = visible_end; key < end; ++key) row_weights[key] = T(0.0f);
}

#define SDPA_PARTIAL(T, TN, M, MN, MASK, DIM)                                       \
  template [[host_name("sdpa_partial_" #TN "_" #MN "_" #DIM)]] [[kernel]]            \
  decltype(sdpa_partial<T, M, MASK, DIM>) sdpa_partial<T, M, MASK, DIM>;            \
  template [[host_name("sdpa_weights_" #TN "_" #MN "_" #DIM)]] [[kernel]]            \
  decltype(sdpa_weights<T, M, MASK, DIM>) sdpa_weights<T, M, MASK, DIM>;

#define SDPA_MASKED(T, TN, M, MN, MASK)                                              \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 64)                                               \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 128)                                              \
  SDPA_PARTIAL(T, TN, M, MN, MASK, 256)

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
