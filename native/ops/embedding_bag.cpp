#include "ops/embedding_bag.h"

#include <algorithm>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/indexing.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// embedding_bag_split (shaders/indexing.metal): features per threadgroup (the lanes), at most
// kBagMaxSlices simdgroups splitting each bag, one per kEntriesPerSlice entries of an average bag.
constexpr uint64_t kBagFeatures = 32;
constexpr uint64_t kBagMaxSlices = 8;
constexpr uint64_t kEntriesPerSlice = 32;

bool is_index_dtype(int32_t dtype) {
  return dtype == static_cast<int32_t>(DType::int64) || dtype == static_cast<int32_t>(DType::int32);
}

}  // namespace

EmbeddingBagOutputs embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                                  int64_t mode, const Tensor* per_sample_weights, bool include_last_offset,
                                  int64_t padding_idx) {
  constexpr const char* op = "embedding_bag";
  require_mps(op, "weight", weight);
  require_mps(op, "indices", indices);
  require_mps(op, "offsets", offsets);
  const char* suffix = msl_float_type_name(weight.dtype);
  ETM_REQUIRE(suffix, op, ": expected weight to be floating point type, got ", dtype_name(weight.dtype));
  ETM_REQUIRE(weight.dim() == 2, op, ": weight has to be a 2D Tensor, got ", weight.dim(), " dimensions");
  ETM_REQUIRE(is_index_dtype(indices.dtype), op, ": expected indices to be long or int, got ", dtype_name(indices.dtype));
  ETM_REQUIRE(is_index_dtype(offsets.dtype), op, ": expected offsets to be long or int, got ", dtype_name(offsets.dtype));
  ETM_REQUIRE(indices.dim() == 1, op, ": input has to be a 1D Tensor, got ", indices.dim(), " dimensions");
  ETM_REQUIRE(offsets.dim() == 1, op, ": offsets has to be a 1D Tensor, got ", offsets.dim(), " dimensions");
  ETM_REQUIRE(mode >= 0 && mode <= 2, op, ": mode has to be 0 (sum), 1 (mean) or 2 (max), got ", mode);
  int64_t bags = offsets.sizes[0];
  if (include_last_offset) {
    ETM_REQUIRE(bags >= 1, op, ": include_last_offset: numBags should be at least 1");
    --bags;
  }
  if (per_sample_weights) {
    require_mps(op, "per_sample_weights", *per_sample_weights);
    ETM_REQUIRE(mode == static_cast<int64_t>(EmbeddingBagMode::sum), op,
                ": per_sample_weights only supported with mode='sum'");
    ETM_REQUIRE(per_sample_weights->dim() == 1 && per_sample_weights->numel() == indices.numel(), op,
                ": expected per_sample_weights to be a 1D tensor of ", indices.numel(), " elements, got ",
                shape_text(per_sample_weights->sizes));
    ETM_REQUIRE(per_sample_weights->dtype == weight.dtype, op, ": expected per_sample_weights to have weight's dtype ",
                dtype_name(weight.dtype), ", got ", dtype_name(per_sample_weights->dtype));
  }
  const int64_t features = weight.sizes[1];
  Runtime& runtime = Runtime::get();
  const int32_t index_dtype = indices.dtype;
  EmbeddingBagOutputs result;
  result.output = runtime.empty_tensor({bags, features}, {features, 1}, weight.dtype);
  result.offset2bag = runtime.empty_tensor({indices.sizes[0]}, {1}, index_dtype);
  result.bag_size = runtime.empty_tensor({offsets.sizes[0]}, {1}, index_dtype);
  const bool max_mode = mode == static_cast<int64_t>(EmbeddingBagMode::max);
  result.max_indices = max_mode ? runtime.empty_tensor({bags, features}, {features, 1}, index_dtype)
                                : runtime.empty_tensor({0}, {1}, index_dtype);
  Stream& stream = runtime.current_stream();
  if (result.offset2bag->numel()) {
    stream.fill_buffer(result.offset2bag->storage->buffer, result.offset2bag->buffer_offset(),
                       result.offset2bag->numel() * result.offset2bag->itemsize(), 0);
  }
  if (result.bag_size->numel()) {
    stream.fill_buffer(result.bag_size->storage->buffer, result.bag_size->buffer_offset(),
                       result.bag_size->numel() * result.bag_size->itemsize(), 0);
  }
  if (bags == 0) return result;

  EmbeddingBagParams p{};
  p.weight_strides[0] = weight.strides[0];
  p.weight_strides[1] = weight.strides[1];
  p.out_strides[0] = result.output->strides[0];
  p.out_strides[1] = result.output->strides[1];
  p.index_stride = indices.strides[0];
  p.offset_stride = offsets.strides[0];
  p.sample_weight_stride = per_sample_weights ? per_sample_weights->strides[0] : 0;
  p.padding_idx = padding_idx < 0 ? -1 : padding_idx;
  p.rows = checked_u32(op, weight.sizes[0], "number of rows");
  p.features = checked_u32(op, features, "number of features");
  p.indices = checked_u32(op, indices.sizes[0], "number of indices");
  p.bags = checked_u32(op, bags, "number of bags");
  p.mode = static_cast<uint32_t>(mode);
  p.long_indices = index_dtype == static_cast<int32_t>(DType::int64) ? 1 : 0;
  p.long_offsets = offsets.dtype == static_cast<int32_t>(DType::int64) ? 1 : 0;
  p.bag_ends_given = include_last_offset ? 1 : 0;
  p.has_sample_weights = per_sample_weights ? 1 : 0;

  std::shared_ptr<Tensor> fault = new_fault_record();
  // Operands without storage (no indices, no features) are never read: any buffer will do.
  const Tensor& any = *result.bag_size;
  // The GPU shape splits each bag over the simdgroups of a threadgroup (long bags are not walked
  // by one thread); the CPU device's one thread per (feature, bag) is fastest there.
  const uint64_t slices = std::clamp<uint64_t>(p.indices / (p.bags * kEntriesPerSlice), 1, kBagMaxSlices);
  const std::string name = std::string("embedding_bag_split_") + suffix;
  const bool split = launch_shape() == LaunchShape::gpu &&
                     shader_kernel("indexing.metal", name).max_threads_per_group() >= 32 * slices;
  KernelLaunch launch(shader_kernel("indexing.metal", split ? name : std::string("embedding_bag_") + suffix));
  launch.tensor(0, weight.numel() ? weight : any)
      .tensor(1, indices.numel() ? indices : any)
      .tensor(2, offsets)
      .tensor(3, per_sample_weights && per_sample_weights->numel() ? *per_sample_weights : any)
      .tensor(4, result.output->numel() ? *result.output : any)
      .tensor(5, result.offset2bag->numel() ? *result.offset2bag : any)
      .tensor(6, *result.bag_size)
      .tensor(7, result.max_indices->numel() ? *result.max_indices : any)
      .tensor(8, *fault)
      .value(9, p);
  const int64_t rows = weight.sizes[0];
  launch.completion_check([fault, op, rows]() -> std::string {
    const Fault seen = read_fault_record(*fault);
    if (seen.number < 0) return {};
    return concat(op, ": index ", seen.value, " is out of range for a weight of ", rows, " rows");
  });
  if (split) {
    launch.threadgroups({std::max<uint64_t>((p.features + kBagFeatures - 1) / kBagFeatures, 1), p.bags, 1},
                        {32 * slices, 1, 1});
    return result;
  }
  const device::Size3 grid{std::max<uint64_t>(p.features, 1), p.bags, 1};
  launch.threads(grid, default_group(grid, launch));
  return result;
}

}  // namespace etm::ops
