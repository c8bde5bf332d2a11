#include "ops/indexing.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/selection.h"
#include "ops/shader_kernels.h"
#include "ops/sort.h"
#include "params/indexing.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "indexing.metal";

// One index tensor once masks are expanded into their coordinates, and the self dimension it
// selects in. `owned` keeps a mask's coordinate column alive.
struct IndexEntry {
  int64_t dim;
  const Tensor* tensor;
  std::shared_ptr<Tensor> owned;
};

struct IndexPlan {
  IndexParams params{};
  std::vector<IndexEntry> entries;
  std::vector<int64_t> result_sizes;
  // Per result dimension: the plain dimension's number, or -(broadcast dimension + 1).
  std::vector<int> result_dims;
};

bool is_mask(const Tensor& t) {
  return t.dtype == static_cast<int32_t>(DType::bool_) || t.dtype == static_cast<int32_t>(DType::uint8);
}

// Appends the entries of one `indices` item that starts at self dimension `dim`; returns the
// number of self dimensions it covers.
int64_t add_entries(const char* op, const Tensor& self, int64_t dim, const Tensor& index,
                    std::vector<IndexEntry>& entries) {
  require_mps(op, "an index", index);
  if (is_mask(index)) {
    ETM_REQUIRE(index.dim() > 0, op, ": a 0-dim mask is not supported as an index");
    ETM_REQUIRE(dim + index.dim() <= self.dim(), op, ": too many indices for tensor of dimension ",
                self.dim());
    for (int64_t d = 0; d < index.dim(); ++d) {
      ETM_REQUIRE(index.sizes[d] == self.sizes[dim + d], op, ": The shape of the mask ",
                  shape_text(index.sizes), " at index ", d, " does not match the shape of the indexed tensor ",
                  shape_text(self.sizes), " at index ", dim + d);
    }
    std::shared_ptr<Tensor> coordinates = nonzero(index);
    for (int64_t d = 0; d < index.dim(); ++d) {
      auto column = std::make_shared<Tensor>(*coordinates);
      column->sizes = {coordinates->sizes[0]};
      column->strides = {index.dim()};
      column->storage_offset = d;
      entries.push_back({dim + d, column.get(), column});
    }
    return index.dim();
  }
  ETM_REQUIRE(index.dtype == static_cast<int32_t>(DType::int64) || index.dtype == static_cast<int32_t>(DType::int32),
              op, ": tensors used as indices must be long, int, byte or bool tensors, got ", dtype_name(index.dtype));
  ETM_REQUIRE(index.dim() <= kIndexingMaxDims, op, ": index tensors have at most ", kIndexingMaxDims, " dimensions, not ", index.dim());
  entries.push_back({dim, &index, nullptr});
  return 1;
}

std::vector<int64_t> broadcast_shape(const char* op, const std::vector<IndexEntry>& entries) {
  std::vector<int64_t> shape;
  for (const IndexEntry& entry : entries) {
    const std::vector<int64_t>& sizes = entry.tensor->sizes;
    if (sizes.size() > shape.size()) shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
    const size_t lead = shape.size() - sizes.size();
    for (size_t d = 0; d < sizes.size(); ++d) {
      int64_t& size = shape[lead + d];
      if (size == 1) {
        size = sizes[d];
      } else if (sizes[d] != 1 && sizes[d] != size) {
        std::string shapes;
        for (const IndexEntry& e : entries) shapes += (shapes.empty() ? "" : ", ") + shape_text(e.tensor->sizes);
        fail(op, ": shape mismatch: indexing tensors could not be broadcast together with shapes ", shapes);
      }
    }
  }
  return shape;
}

IndexPlan plan_indexing(const char* op, const Tensor& self, const std::vector<const Tensor*>& indices) {
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() <= kIndexingMaxDims, op, ": at most ", kIndexingMaxDims, " dimensions are supported, not ", self.dim());
  ETM_REQUIRE(static_cast<int64_t>(indices.size()) <= self.dim(), op, ": too many indices for tensor of dimension ",
              self.dim(), " (got ", indices.size(), ")");
  IndexPlan plan;
  std::vector<bool> indexed(self.dim(), false);
  int64_t dim = 0;
  for (const Tensor* index : indices) {
    if (!index) {
      ++dim;
      continue;
    }
    const int64_t covered = add_entries(op, self, dim, *index, plan.entries);
    for (int64_t d = dim; d < dim + covered; ++d) indexed[d] = true;
    dim += covered;
  }
  const std::vector<int64_t> broadcast = broadcast_shape(op, plan.entries);
  IndexParams& p = plan.params;
  p.indices = static_cast<uint32_t>(plan.entries.size());
  p.broadcast_dims = static_cast<uint32_t>(broadcast.size());
  int64_t broadcast_numel = 1;
  for (size_t j = 0; j < broadcast.size(); ++j) {
    p.broadcast_sizes[j] = checked_u32(op, broadcast[j], "size");
    broadcast_numel *= broadcast[j];
  }
  for (size_t k = 0; k < plan.entries.size(); ++k) {
    const IndexEntry& entry = plan.entries[k];
    const Tensor& t = *entry.tensor;
    const size_t lead = broadcast.size() - t.sizes.size();
    for (size_t j = lead; j < broadcast.size(); ++j) {
      p.index_strides[k][j] = t.sizes[j - lead] == 1 ? 0 : t.strides[j - lead];
    }
    p.indexed_self_strides[k] = self.strides[entry.dim];
    p.indexed_sizes[k] = self.sizes[entry.dim];
    if (t.dtype == static_cast<int32_t>(DType::int64)) p.long_indices |= 1u << k;
  }
  int64_t plain_numel = 1;
  std::vector<int> plain_before, plain_after;  // result order: before, broadcast, after
  const bool adjacent = !plan.entries.empty() &&
                        plan.entries.back().dim - plan.entries.front().dim + 1 ==
                            static_cast<int64_t>(plan.entries.size());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (indexed[d]) continue;
    const int i = static_cast<int>(p.plain_dims++);
    p.plain_sizes[i] = checked_u32(op, self.sizes[d], "size");
    p.plain_self_strides[i] = self.strides[d];
    plain_numel *= self.sizes[d];
    (adjacent && d < plan.entries.front().dim ? plain_before : plain_after).push_back(i);
  }
  for (int i : plain_before) plan.result_dims.push_back(i);
  for (size_t j = 0; j < broadcast.size(); ++j) plan.result_dims.push_back(-static_cast<int>(j) - 1);
  for (int i : plain_after) plan.result_dims.push_back(i);
  for (int r : plan.result_dims) plan.result_sizes.push_back(r >= 0 ? int64_t{p.plain_sizes[r]} : broadcast[-r - 1]);
  p.broadcast_numel = checked_u32(op, broadcast_numel, "number of indexed elements");
  p.plain_numel = checked_u32(op, plain_numel, "number of elements");
  checked_u32(op, plain_numel * broadcast_numel, "number of result elements");
  return plan;
}

// The other tensor's (result's or values') strides, one per result dimension, into the params.
void set_other_strides(IndexPlan& plan, const std::vector<int64_t>& strides) {
  for (size_t r = 0; r < plan.result_dims.size(); ++r) {
    const int dim = plan.result_dims[r];
    if (dim >= 0) {
      plan.params.plain_other_strides[dim] = strides[r];
    } else {
      plan.params.broadcast_other_strides[-dim - 1] = strides[r];
    }
  }
}

// Kernel-name suffix for moving elements of t's dtype as unsigned integers of its size.
std::string element_size_suffix(const char* op, const Tensor& t) {
  const size_t size = t.itemsize();
  ETM_REQUIRE(size == 1 || size == 2 || size == 4 || size == 8, op, ": dtype ", dtype_name(t.dtype),
              " is not supported");
  return std::to_string(size);
}

void run_indexing(const char* op, const std::string& kernel, const Tensor& self, const Tensor& other,
                  const IndexPlan& plan, uint64_t threads) {
  if (threads == 0) return;
  std::shared_ptr<Tensor> fault = new_fault_record();
  std::vector<int64_t> dims, sizes;
  for (size_t k = 0; k < plan.entries.size(); ++k) {
    dims.push_back(plan.entries[k].dim);
    sizes.push_back(plan.params.indexed_sizes[k]);
  }
  KernelLaunch launch(shader_kernel(kShaderFile, kernel));
  launch.tensor(0, self).tensor(1, other).tensor(2, *fault).value(3, plan.params);
  for (size_t k = 0; k < kIndexingMaxDims; ++k) {
    launch.tensor(static_cast<unsigned>(4 + k), k < plan.entries.size() ? *plan.entries[k].tensor : self);
  }
  // The masks' coordinate columns stay alive until the kernel has run.
  std::vector<std::shared_ptr<Tensor>> owned;
  for (const IndexEntry& entry : plan.entries) {
    if (entry.owned) owned.push_back(entry.owned);
  }
  launch.completion_check([fault, dims, sizes, owned, op]() -> std::string {
    const Fault fault_seen = read_fault_record(*fault);
    if (fault_seen.number < 0) return {};
    const size_t k = static_cast<size_t>(fault_seen.number);
    return concat(op, ": index ", fault_seen.value, " is out of bounds for dimension ", dims[k], " with size ", sizes[k]);
  });
  const device::Size3 grid{threads, 1, 1};
  launch.threads(grid, default_group(grid, launch));
}

}  // namespace

std::unique_ptr<Tensor> index(const Tensor& self, const std::vector<const Tensor*>& indices) {
  constexpr const char* op = "index";
  IndexPlan plan = plan_indexing(op, self, indices);
  auto out = Runtime::get().empty_tensor(plan.result_sizes, contiguous_strides(plan.result_sizes), self.dtype);
  set_other_strides(plan, out->strides);
  const uint64_t threads = uint64_t{plan.params.plain_numel} * plan.params.broadcast_numel;
  run_indexing(op, "index_gather_" + element_size_suffix(op, self), self, *out, plan, threads);
  return out;
}

void index_put_(const Tensor& self, const std::vector<const Tensor*>& indices, const Tensor& values,
                bool accumulate) {
  constexpr const char* op = "index_put";
  require_mps(op, "values", values);
  ETM_REQUIRE(values.dtype == self.dtype, op, ": Index put requires the source and destination dtypes match, got ",
              dtype_name(self.dtype), " for the destination and ", dtype_name(values.dtype), " for the source.");
  IndexPlan plan = plan_indexing(op, self, indices);
  const std::vector<int64_t>& result = plan.result_sizes;
  const int64_t lead = static_cast<int64_t>(result.size()) - values.dim();
  ETM_REQUIRE(lead >= 0, op, ": shape mismatch: value tensor of shape ", shape_text(values.sizes),
              " cannot be broadcast to indexing result of shape ", shape_text(result));
  std::vector<int64_t> strides(result.size(), 0);
  for (int64_t r = 0; r < static_cast<int64_t>(result.size()); ++r) {
    if (r < lead) continue;  // values have fewer dimensions: broadcast along this one
    const int64_t size = values.sizes[r - lead];
    ETM_REQUIRE(size == result[r] || size == 1, op, ": shape mismatch: value tensor of shape ", shape_text(values.sizes),
                " cannot be broadcast to indexing result of shape ", shape_text(result));
    strides[r] = size == 1 ? 0 : values.strides[r - lead];
  }
  set_other_strides(plan, strides);
  const IndexParams& p = plan.params;
  if (p.broadcast_numel == 0) return;
  if (!accumulate) {
    run_indexing(op, "index_put_" + element_size_suffix(op, self), self, values, plan,
                 uint64_t{p.plain_numel} * p.broadcast_numel);
    return;
  }
  const char* name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(name, op, ": accumulate does not support dtype ", dtype_name(self.dtype));
  if (p.plain_numel == 0 || !sorted_form_wins(p.broadcast_numel, p.plain_numel)) {
    run_indexing(op, std::string("index_put_accumulate_") + name, self, values, plan, p.plain_numel);
    return;
  }
  // Keys are self offsets: int32 when the largest one fits (the sort moves half the bytes).
  int64_t largest_offset = 0;
  for (uint32_t k = 0; k < p.indices; ++k) largest_offset += (p.indexed_sizes[k] - 1) * p.indexed_self_strides[k];
  const bool long_keys = largest_offset > INT32_MAX;
  const std::vector<int64_t> key_sizes = {p.broadcast_numel};
  const auto key_dtype = static_cast<int32_t>(long_keys ? DType::int64 : DType::int32);
  auto keys = Runtime::get().empty_tensor(key_sizes, {1}, key_dtype);
  run_indexing(op, long_keys ? "index_put_accumulate_keys_long" : "index_put_accumulate_keys_int", *keys, *keys, plan,
               p.broadcast_numel);
  const SortOutputs sorted = long_keys ? sort(*keys, 0, false) : sort_bounded_keys(*keys, 1, p.broadcast_numel,
                                                                                     largest_offset + 1);
  KernelLaunch launch(shader_kernel(kShaderFile, std::string("index_put_accumulate_sorted_") + name));
  launch.tensor(0, self).tensor(1, values).value(2, p).tensor(3, *sorted.values).tensor(4, *sorted.indices)
      .value(5, uint32_t{long_keys});
  const device::Size3 grid{(p.plain_numel + kSortedPlainRun - 1) / kSortedPlainRun,
                           (p.broadcast_numel + kSortedKeyRun - 1) / kSortedKeyRun, 1};
  launch.threads(grid, default_group(grid, launch));
}

}  // namespace etm::ops
