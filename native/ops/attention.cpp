#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/attention.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr const char* kShaderFile = "attention.metal";
constexpr int kBatchDims = static_cast<int>(kSdpaBatchDims);
constexpr int64_t kMaxDim = 256;
constexpr uint32_t kBlockThreads = kSdpaBlockThreads;
constexpr int64_t kQueryFloats = kSdpaQueryFloats;
constexpr int64_t kTileScores = kSdpaTileScores;
// Longer key blocks only lengthen the per-slot loops of a group with few slots (decode).
constexpr int64_t kMaxBlockKeys = 128;
// A split shorter than this spends more on its partial record than on its keys.
constexpr int64_t kMinSplitKeys = 128;
constexpr uint32_t kFinishThreads = kSdpaFinishThreads;
constexpr int64_t kMaxSplits = kSdpaMaxSplits;
// Enough threads to fill the device: below this the keys are split across more threadgroups.
constexpr int64_t kTargetThreads = 16384;

// The sdpa_block kernel's head-dimension class (the largest query/key or value dim it holds).
int64_t dim_class_of(int64_t dim) { return dim <= 64 ? 64 : dim <= 128 ? 128 : 256; }

// (query row, head) slots of an sdpa_block group: sdpa_slots in shaders/attention.metal. Each
// group reads its keys and values once, so more slots mean fewer reads; the staged query rows
// (slots * dim floats) and one slot per thread bound them.
int64_t slots_for(int64_t dim_class) { return std::min<int64_t>(kBlockThreads, kQueryFloats / dim_class); }


// Strides of a [batch..., head, row, column] tensor with its batch dimensions right-aligned
// into four slots (missing ones: stride 0).
SdpaStrides strides_of(const std::vector<int64_t>& strides) {
  SdpaStrides s{};
  const int n = static_cast<int>(strides.size());
  const int batch_dims = n - 3;
  for (int d = 0; d < batch_dims; ++d) s.batch[kBatchDims - batch_dims + d] = strides[d];
  s.head = strides[n - 3];
  s.row = strides[n - 2];
  s.column = strides[n - 1];
  return s;
}

// Strides of `mask` broadcast (from the right, as torch does) to `shape`; 0 where broadcast.
std::vector<int64_t> broadcast_strides(const Tensor& mask, const std::vector<int64_t>& shape) {
  const size_t n = shape.size();
  ETM_REQUIRE(mask.sizes.size() <= n, kOp, ": attn_mask has ", mask.sizes.size(),
              " dimensions, more than the attention weights' ", n);
  std::vector<int64_t> strides(n, 0);
  const size_t offset = n - mask.sizes.size();
  for (size_t d = 0; d < mask.sizes.size(); ++d) {
    const int64_t size = mask.sizes[d];
    ETM_REQUIRE(size == 1 || size == shape[offset + d], kOp, ": attn_mask of size ", size,
                " in dimension ", d, " does not broadcast to size ", shape[offset + d]);
    strides[offset + d] = size == 1 ? 0 : mask.strides[d];
  }
  return strides;
}

}  // namespace

AttentionOutputs scaled_dot_product_attention(const Tensor& query, const Tensor& key,
                                              const Tensor& value, const Tensor* mask,
                                              double dropout_p, bool is_causal,
                                              std::optional<double> scale) {
  ETM_REQUIRE(dropout_p == 0.0, kOp, ": dropout_p = ", dropout_p,
              " is not supported (only inference without dropout)");
  require_mps(kOp, "query", query);
  require_mps(kOp, "key", key);
  require_mps(kOp, "value", value);
  const int64_t n = query.dim();
  ETM_REQUIRE(n >= 3 && n <= 3 + kBatchDims, kOp, ": query must have 3 to ", 3 + kBatchDims,
              " dimensions [batch..., heads, rows, head_dim], not ", n);
  ETM_REQUIRE(key.dim() == n && value.dim() == n, kOp, ": query, key and value must have the same number of dimensions (",
              n, ", ", key.dim(), ", ", value.dim(), ")");
  const char* type_name = msl_float_type_name(query.dtype);
  ETM_REQUIRE(type_name, kOp, ": query dtype ", dtype_name(query.dtype),
              " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(key.dtype == query.dtype && value.dtype == query.dtype, kOp,
              ": key and value must have the query's dtype ", dtype_name(query.dtype), " (got ",
              dtype_name(key.dtype), ", ", dtype_name(value.dtype), ")");
  for (int64_t d = 0; d < n - 3; ++d) {
    ETM_REQUIRE(key.sizes[d] == query.sizes[d] && value.sizes[d] == query.sizes[d], kOp,
                ": batch dimension ", d, " differs between query (", query.sizes[d], "), key (",
                key.sizes[d], ") and value (", value.sizes[d], ")");
  }
  const int64_t heads = query.sizes[n - 3], rows = query.sizes[n - 2], head_dim = query.sizes[n - 1];
  const int64_t kv_heads = key.sizes[n - 3], keys = key.sizes[n - 2];
  const int64_t value_dim = value.sizes[n - 1];
  ETM_REQUIRE(value.sizes[n - 3] == kv_heads && value.sizes[n - 2] == keys, kOp,
              ": key [", kv_heads, " heads, ", keys, " keys] and value [", value.sizes[n - 3],
              " heads, ", value.sizes[n - 2], " keys] disagree");
  ETM_REQUIRE(key.sizes[n - 1] == head_dim, kOp, ": key head_dim ", key.sizes[n - 1],
              " differs from the query's ", head_dim);
  ETM_REQUIRE(kv_heads > 0 && heads % kv_heads == 0, kOp, ": query heads (", heads,
              ") must be a multiple of key/value heads (", kv_heads, ")");
  ETM_REQUIRE(head_dim >= 1 && head_dim <= kMaxDim && value_dim >= 1 && value_dim <= kMaxDim, kOp,
              ": head dimensions must be in 1..", kMaxDim, " (query/key ", head_dim, ", value ",
              value_dim, ")");
  ETM_REQUIRE(!(is_causal && mask), kOp, ": attn_mask must not be given when is_causal is set");

  std::vector<int64_t> output_sizes = query.sizes;
  output_sizes[n - 1] = value_dim;
  std::vector<int64_t> weight_sizes = query.sizes;
  weight_sizes[n - 1] = keys;

  SdpaParams p{};
  p.q = strides_of(query.strides);
  p.k = strides_of(key.strides);
  p.v = strides_of(value.strides);
  int64_t batch = 1;
  for (int d = 0; d < kBatchDims; ++d) p.batch_sizes[d] = 1;
  for (int64_t d = 0; d < n - 3; ++d) {
    p.batch_sizes[kBatchDims - (n - 3) + d] = checked_u32(kOp, query.sizes[d], "batch size");
    batch *= query.sizes[d];
  }
  const char* mask_name = "none";
  if (mask) {
    require_mps(kOp, "attn_mask", *mask);
    if (mask->dtype == static_cast<int32_t>(DType::bool_)) {
      mask_name = "bool";
    } else {
      ETM_REQUIRE(mask->dtype == query.dtype || mask->dtype == static_cast<int32_t>(DType::float32),
                  kOp, ": attn_mask dtype ", dtype_name(mask->dtype),
                  " must be bool, float32 or the query's dtype ", dtype_name(query.dtype));
      mask_name = msl_float_type_name(mask->dtype);
    }
    p.mask = strides_of(broadcast_strides(*mask, weight_sizes));
  }
  p.heads = checked_u32(kOp, heads, "heads");
  p.kv_group = static_cast<uint32_t>(heads / kv_heads);
  p.rows = checked_u32(kOp, rows, "query length");
  p.keys = checked_u32(kOp, keys, "key length");
  p.head_dim = static_cast<uint32_t>(head_dim);
  p.value_dim = static_cast<uint32_t>(value_dim);
  p.causal = is_causal ? 1 : 0;
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim)));

  const int32_t dtype = query.dtype;
  Runtime& runtime = Runtime::get();
  AttentionOutputs result;
  result.output = runtime.empty_tensor(output_sizes, contiguous_strides(output_sizes), dtype);
  result.weights = runtime.empty_tensor(weight_sizes, contiguous_strides(weight_sizes), dtype);
  const std::vector<int64_t> row_sizes(output_sizes.begin(), output_sizes.end() - 1);
  result.log_sum_exp = runtime.empty_tensor(row_sizes, contiguous_strides(row_sizes),
                                            static_cast<int32_t>(DType::float32));
  const int64_t batch_heads = batch * heads;
  if (batch_heads == 0 || rows == 0) return result;
  checked_u32(kOp, batch_heads, "batch * heads");
  checked_u32(kOp, rows * batch * kv_heads, "query rows * batch * key/value heads");

  const int64_t row_count = batch_heads * rows;
  const int64_t dim_class = dim_class_of(std::max(head_dim, value_dim));
  // A group holds up to max_slots (query row, head) pairs of one key/value head: the heads
  // that share it first (they read the same keys), then consecutive rows.
  const int64_t max_slots = slots_for(dim_class);
  const int64_t kv_group = heads / kv_heads;
  const int64_t block_heads = std::min(kv_group, max_slots);
  const int64_t block_rows = std::min(rows, max_slots / block_heads);
  const int64_t member_blocks = (kv_group + block_heads - 1) / block_heads;
  const int64_t row_blocks = (rows + block_rows - 1) / block_rows;
  const int64_t groups_per_split = row_blocks * batch * kv_heads * member_blocks;
  const int64_t block_keys = std::min(kMaxBlockKeys, kTileScores / (block_heads * block_rows));
  // Split the keys when that is too few threads, for decode-like problems (one block of rows):
  // for prefill the extra query loads and partial records cost more than the threads gain.
  int64_t splits = row_blocks > 1 ? 1 : std::clamp<int64_t>((kTargetThreads / kBlockThreads + groups_per_split - 1) / groups_per_split,
                                       1, std::min(kMaxSplits, std::max<int64_t>(1, (keys + kMinSplitKeys - 1) / kMinSplitKeys)));
  // Splits start on key blocks (sdpa_finish finds a key's block maximum by key / block_keys).
  const int64_t split_length = keys == 0 ? 0 : ((keys + splits - 1) / splits + block_keys - 1) / block_keys * block_keys;
  if (keys > 0) splits = (keys + split_length - 1) / split_length;
  p.splits = static_cast<uint32_t>(splits);
  p.split_length = checked_u32(kOp, split_length, "key split length");
  p.block_heads = static_cast<uint32_t>(block_heads);
  p.block_rows = static_cast<uint32_t>(block_rows);
  p.block_keys = static_cast<uint32_t>(block_keys);
  checked_u32(kOp, groups_per_split, "attention threadgroups");

  const std::string suffix = std::string(type_name) + "_" + mask_name;
  // Without keys there is nothing to read: bind the query in the key/value slots.
  const Tensor& k_bound = keys > 0 ? key : query;
  const Tensor& v_bound = keys > 0 ? value : query;
  const Tensor& mask_bound = mask ? *mask : query;

  // Per (row, split): max, sum and unnormalised output; a single split: the log-sum-exp,
  // written where the result keeps it.
  std::unique_ptr<Tensor> split_records;
  if (splits > 1) {
    split_records = runtime.empty_tensor({row_count * splits * (value_dim + 2)}, {1},
                                         static_cast<int32_t>(DType::float32));
  }
  const Tensor* partial = splits > 1 ? split_records.get() : result.log_sum_exp.get();
  // The running maximum behind each (row, key block)'s stored probabilities.
  const int64_t key_blocks = (keys + block_keys - 1) / block_keys;
  std::unique_ptr<Tensor> block_max;
  if (keys > 0) block_max = runtime.empty_tensor({row_count * key_blocks}, {1}, static_cast<int32_t>(DType::float32));
  const Tensor& block_max_bound = block_max ? *block_max : *partial;
  const Tensor& weights_bound = keys == 0 ? *result.output : *result.weights;

  {
    KernelLaunch launch(shader_kernel(kShaderFile, "sdpa_block_" + suffix + "_" + std::to_string(dim_class)));
    launch.tensor(0, query).tensor(1, k_bound).tensor(2, v_bound).tensor(3, mask_bound)
        .tensor(4, weights_bound).tensor(5, *partial).value(6, p).tensor(7, *result.output)
        .tensor(8, block_max_bound)
        .threadgroups({static_cast<uint64_t>(splits), static_cast<uint64_t>(row_blocks),
                       static_cast<uint64_t>(batch * kv_heads * member_blocks)},
                      {kBlockThreads, 1, 1});
  }
  {
    KernelLaunch launch(shader_kernel(kShaderFile, std::string("sdpa_finish_") + type_name));
    launch.tensor(0, *partial).tensor(1, block_max_bound).tensor(2, *result.output).tensor(3, weights_bound).value(4, p)
        .tensor(5, *result.log_sum_exp)
        .threadgroups({static_cast<uint64_t>(rows), static_cast<uint64_t>(batch_heads), 1}, {kFinishThreads, 1, 1});
  }
  return result;
}

FusedAttentionOutputs scaled_dot_product_fused_attention(const Tensor& query, const Tensor& key,
                                                         const Tensor& value, const Tensor* attn_bias,
                                                         double dropout_p, bool is_causal,
                                                         std::optional<double> scale) {
  constexpr const char* op = "_scaled_dot_product_fused_attention_overrideable";
  ETM_REQUIRE(query.dim() == 3 || query.dim() == 4, op, ": query must be 3D or 4D, not ", query.dim(), "D");
  ETM_REQUIRE(dropout_p == 0.0, op, ": dropout_p = ", dropout_p,
              " is not supported (inference without dropout; torch has no reference kernel for it)");
  AttentionOutputs attention = scaled_dot_product_attention(query, key, value, attn_bias, dropout_p,
                                                            is_causal, scale);
  FusedAttentionOutputs result;
  result.log_sum_exp = std::move(attention.log_sum_exp);
  if (query.dim() == 3) {
    result.log_sum_exp->sizes.insert(result.log_sum_exp->sizes.begin(), 1);
    result.log_sum_exp->strides = contiguous_strides(result.log_sum_exp->sizes);
  }
  // torch's meta function: strides in the order of the query's, largest first (ties: earlier
  // dimension outer).
  const std::vector<int64_t>& sizes = attention.output->sizes;
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return query.strides[a] > query.strides[b]; });
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    strides[*d] = stride;
    stride *= sizes[*d];
  }
  if (strides == attention.output->strides) {
    result.output = std::move(attention.output);
  } else {
    Runtime& runtime = Runtime::get();
    result.output = runtime.empty_tensor(sizes, strides, query.dtype);
    runtime.copy_tensor(*result.output, *attention.output);
  }
  return result;
}

}  // namespace etm::ops
