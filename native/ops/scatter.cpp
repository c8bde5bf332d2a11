#include "ops/scatter.h"

#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "ops/sort.h"
#include "params/indexing.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "indexing.metal";

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage == b.storage && a.storage_offset == b.storage_offset && a.sizes == b.sizes &&
         a.strides == b.strides && a.dtype == b.dtype;
}

// A 0-dim tensor's layout as one dimension of size 1, as ATen's scatter treats it.
std::vector<int64_t> sizes_of(const Tensor& t) { return t.dim() ? t.sizes : std::vector<int64_t>{1}; }
std::vector<int64_t> strides_of(const Tensor& t) { return t.dim() ? t.strides : std::vector<int64_t>{1}; }

void check_operands(const char* op, const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                    const Tensor* src, ScatterReduction reduction) {
  require_mps(op, "out", out);
  require_mps(op, "self", self);
  require_mps(op, "index", index);
  if (src) require_mps(op, "src", *src);
  ETM_REQUIRE(msl_element_type_name(self.dtype), op, ": dtype ", dtype_name(self.dtype), " is not supported");
  ETM_REQUIRE(out.dtype == self.dtype && out.sizes == self.sizes, op, ": out (", dtype_name(out.dtype), " ",
              shape_text(out.sizes), ") must have self's dtype and shape (", dtype_name(self.dtype), " ",
              shape_text(self.sizes), ")");
  ETM_REQUIRE(!src || src->dtype == self.dtype, op, ": Expected self.dtype to be equal to src.dtype (",
              dtype_name(self.dtype), " and ", dtype_name(src ? src->dtype : self.dtype), ")");
  ETM_REQUIRE(index.dtype == static_cast<int32_t>(DType::int64) || index.dtype == static_cast<int32_t>(DType::int32),
              op, ": Expected dtype int64 or int32 for index, got ", dtype_name(index.dtype));
  ETM_REQUIRE(!(reduction == ScatterReduction::mean && self.dtype == static_cast<int32_t>(DType::bool_)), op,
              ": reduce 'mean' is not supported for bool");
  ETM_REQUIRE(self.dim() <= kIndexingMaxDims, op, ": at most ", kIndexingMaxDims, " dimensions are supported, not ", self.dim());
  const auto dims = sizes_of(self).size();
  ETM_REQUIRE(sizes_of(index).size() == dims, op,
              ": Index tensor must have the same number of dimensions as self tensor");
  ETM_REQUIRE(!src || sizes_of(*src).size() == dims, op,
              ": Index tensor must have the same number of dimensions as src tensor");
  const std::vector<int64_t> index_sizes = sizes_of(index), self_sizes = sizes_of(self);
  for (size_t d = 0; d < dims; ++d) {
    const bool fits_src = !src || index_sizes[d] <= sizes_of(*src)[d];
    const bool fits_self = static_cast<int64_t>(d) == dim || index_sizes[d] <= self_sizes[d];
    ETM_REQUIRE(fits_src && fits_self, op, ": Expected index ", shape_text(index.sizes), " to be no larger than self ",
                shape_text(self.sizes), " apart from dimension ", dim, src ? " and to be no larger size than src " : "",
                src ? shape_text(src->sizes) : "");
  }
}

void run_scatter(const char* op, const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index,
                 const Tensor* src, uint64_t value_bits, ScatterReduction reduction, bool include_self) {
  dim = wrap_dim(op, dim, self.dim());
  check_operands(op, out, self, dim, index, src, reduction);
  Runtime& runtime = Runtime::get();
  if (!same_view(out, self)) runtime.copy_tensor(out, self);
  if (index.numel() == 0) return;
  const std::vector<int64_t> out_sizes = sizes_of(out);
  ETM_REQUIRE(out_sizes[dim] > 0, op, ": index is out of bounds for dimension ", dim, " with size 0");

  ScatterParams p{};
  const std::vector<int64_t> index_sizes = sizes_of(index), out_strides = strides_of(out),
                             index_strides = strides_of(index);
  const std::vector<int64_t> src_strides = src ? strides_of(*src) : std::vector<int64_t>(index_sizes.size(), 0);
  p.dims = static_cast<uint32_t>(index_sizes.size());
  p.dim = static_cast<uint32_t>(dim);
  int64_t lines = 1;
  for (size_t d = 0; d < index_sizes.size(); ++d) {
    p.out_strides[d] = out_strides[d];
    p.index_strides[d] = index_strides[d];
    p.src_strides[d] = src_strides[d];
    p.line_sizes[d] = static_cast<int64_t>(d) == dim ? 1 : checked_u32(op, index_sizes[d], "size");
    lines *= p.line_sizes[d];
  }
  p.length = checked_u32(op, index_sizes[dim], "size");
  p.out_size = checked_u32(op, out_sizes[dim], "size");
  p.reduction = static_cast<uint32_t>(reduction);
  p.include_self = include_self ? 1 : 0;
  p.long_index = index.dtype == static_cast<int32_t>(DType::int64) ? 1 : 0;
  p.scalar_src = src ? 0 : 1;
  p.value_bits = value_bits;

  std::shared_ptr<Tensor> fault = new_fault_record();
  const int64_t size = out_sizes[dim];
  const auto fault_message = [fault, op, dim, size]() -> std::string {
    const Fault fault_seen = read_fault_record(*fault);
    if (fault_seen.number < 0) return {};
    return concat(op, ": index ", fault_seen.value, " is out of bounds for dimension ", dim, " with size ", size);
  };
  const char* type_name = msl_element_type_name(self.dtype);
  if (p.out_size <= INT32_MAX && sorted_form_wins(p.length, lines)) {  // int32 keys
    const int64_t count = checked_u32(op, index.numel(), "number of index elements");
    auto keys = runtime.empty_tensor({count}, {1}, static_cast<int32_t>(DType::int32));
    const device::Size3 grid{static_cast<uint64_t>(count), 1, 1};
    KernelLaunch keys_launch(shader_kernel(kShaderFile, "scatter_keys"));
    keys_launch.tensor(0, *keys).tensor(1, index).tensor(2, *fault).value(3, p).completion_check(fault_message);
    keys_launch.threads(grid, default_group(grid, keys_launch));
    const SortOutputs sorted = sort_bounded_keys(*keys, lines, p.length, p.out_size);
    KernelLaunch launch(shader_kernel(kShaderFile, std::string("scatter_sorted_") + type_name));
    launch.tensor(0, out).tensor(1, *sorted.values).tensor(2, src ? *src : out).tensor(3, *sorted.indices)
        .value(4, p);
    const device::Size3 chunks{static_cast<uint64_t>(lines) * ((p.length + kSortedKeyRun - 1) / kSortedKeyRun), 1, 1};
    launch.threads(chunks, default_group(chunks, launch));
    return;
  }
  Stream& stream = runtime.current_stream();
  std::shared_ptr<Tensor> counts;
  if (reduction == ScatterReduction::mean) {
    counts = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), static_cast<int32_t>(DType::int32));
    stream.fill_buffer(counts->storage->buffer, counts->buffer_offset(), counts->numel() * sizeof(int32_t), 0);
    for (size_t d = 0; d < out_sizes.size(); ++d) p.count_strides[d] = counts->strides[d];
  }
  KernelLaunch launch(shader_kernel(kShaderFile, std::string("scatter_") + type_name));
  launch.tensor(0, out).tensor(1, index).tensor(2, src ? *src : out).tensor(3, *fault)
      .tensor(4, counts ? *counts : *fault).value(5, p).completion_check(fault_message);
  const device::Size3 grid{checked_u32(op, lines, "number of index lines"), 1, 1};
  launch.threads(grid, default_group(grid, launch));
}

}  // namespace

ScatterReduction scatter_reduction(const char* op, const char* name) {
  ETM_REQUIRE(name, op, ": reduce is null");
  const std::string reduce(name);
  if (reduce == "sum") return ScatterReduction::sum;
  if (reduce == "prod") return ScatterReduction::prod;
  if (reduce == "mean") return ScatterReduction::mean;
  if (reduce == "amax") return ScatterReduction::amax;
  if (reduce == "amin") return ScatterReduction::amin;
  fail(op, ": reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
}

void scatter_into(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                  ScatterReduction reduction, bool include_self) {
  run_scatter(reduction == ScatterReduction::assign ? "scatter" : "scatter_reduce", out, self, dim, index, &src, 0,
              reduction, include_self);
}

void scatter_value_into(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, double value) {
  uint64_t bits = 0;
  ETM_REQUIRE(is_tensor_dtype(self.dtype), "scatter: dtype ", self.dtype, " is not supported");
  convert_elements(&value, static_cast<int32_t>(DType::float64), &bits, self.dtype, 1);
  run_scatter("scatter", out, self, dim, index, nullptr, bits, ScatterReduction::assign, true);
}

std::unique_ptr<Tensor> index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                                     ScatterReduction reduction, bool include_self) {
  constexpr const char* op = "index_reduce";
  ETM_REQUIRE(reduction != ScatterReduction::sum && reduction != ScatterReduction::assign, op,
              ": Expected reduce to be one of prod, mean, amax or amin");
  require_mps(op, "index", index);
  require_mps(op, "source", source);
  dim = wrap_dim(op, dim, self.dim());
  ETM_REQUIRE(index.dim() <= 1, op, ": Index is supposed to be a vector, but got dim: ", index.dim());
  const std::vector<int64_t> self_sizes = sizes_of(self), source_sizes = sizes_of(source);
  ETM_REQUIRE(source_sizes.size() == self_sizes.size(), op,
              ": Source and self must have the same number of dimensions");
  for (size_t d = 0; d < self_sizes.size(); ++d) {
    ETM_REQUIRE(static_cast<int64_t>(d) == dim || source_sizes[d] == self_sizes[d], op, ": source ",
                shape_text(source.sizes), " and self ", shape_text(self.sizes), " must match apart from dimension ",
                dim);
  }
  ETM_REQUIRE(index.numel() == source_sizes[dim], op, ": Number of indices (", index.numel(),
              ") should be equal to source.size(dim): (", source_sizes[dim], "), for dim: ", dim);
  // The index read along dim at every position of source: a scatter index of source's shape.
  Tensor spread = index;
  spread.sizes = source_sizes;
  spread.strides.assign(source_sizes.size(), 0);
  spread.strides[dim] = index.dim() ? index.strides[0] : 0;
  Runtime& runtime = Runtime::get();
  auto out = runtime.empty_tensor(self.sizes, contiguous_strides(self.sizes), self.dtype);
  run_scatter(op, *out, self, dim, spread, &source, 0, reduction, include_self);
  return out;
}

}  // namespace etm::ops
