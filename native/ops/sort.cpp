#include "ops/sort.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "sort.metal";
constexpr uint32_t kBlock = 16;  // elements insertion-sorted per thread before merging

// Must match SortParams in shaders/sort.metal.
struct SortParams {
  LineLayout layout;
  uint32_t lines;
  uint32_t block;
  uint32_t width;
  uint32_t count;
  uint32_t descending;
  uint32_t select;
  uint32_t first;
};
static_assert(sizeof(SortParams) == 288, "SortParams must match the MSL layout");

// Where sort_store starts in each sorted line; must match shaders/sort.metal.
enum class StoreFrom : uint32_t { first = 0, median = 1, nan_median = 2 };

// Sorts every line of `self` along `dim` and keeps `count` elements of each, from sorted
// position `first` on, or from the median on.
SortOutputs sort_lines(const char* op, const Tensor& self, int64_t dim, bool descending,
                       int64_t count, StoreFrom from = StoreFrom::first, int64_t first = 0) {
  require_mps(op, "self", self);
  const char* type_name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(type_name, op, ": dtype ", dtype_name(self.dtype), " is not supported");
  const int64_t n = self.dim();
  dim = wrap_dim(op, dim, n);
  const int64_t length = n == 0 ? 1 : self.sizes[dim];
  ETM_REQUIRE(count >= 0 && count <= length, op, ": k = ", count, " is out of range for ", length,
              " elements along dim ", dim);

  std::vector<int64_t> out_sizes = self.sizes;
  if (n > 0) out_sizes[dim] = count;
  const std::vector<int64_t> out_strides = contiguous_strides(out_sizes);
  Runtime& runtime = Runtime::get();
  SortOutputs result;
  result.values = runtime.empty_tensor(out_sizes, out_strides, self.dtype);
  result.indices = runtime.empty_tensor(out_sizes, out_strides, static_cast<int32_t>(DType::int64));

  SortParams p{};
  const int64_t lines = lay_out_lines(op, self, dim, out_strides, p.layout);
  if (lines == 0) return result;
  p.lines = checked_u32(op, lines, "number of lines");
  checked_u32(op, lines * length, "element count");
  p.block = kBlock;
  p.count = static_cast<uint32_t>(count);
  p.descending = descending ? 1 : 0;
  p.select = static_cast<uint32_t>(from);
  p.first = static_cast<uint32_t>(first);

  const std::vector<int64_t> work_sizes = {lines * length};
  std::unique_ptr<Tensor> work_values[2], work_indices[2];
  for (int i = 0; i < 2; ++i) {
    work_values[i] = runtime.empty_tensor(work_sizes, {1}, self.dtype);
    work_indices[i] = runtime.empty_tensor(work_sizes, {1}, static_cast<int32_t>(DType::int64));
  }
  const std::string suffix = type_name;
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "sort_blocks_" + suffix));
    const device::Size3 grid{(static_cast<uint64_t>(length) + kBlock - 1) / kBlock,
                             static_cast<uint64_t>(lines), 1};
    launch.tensor(0, self).tensor(1, *work_values[0]).tensor(2, *work_indices[0]).value(3, p)
        .threads(grid, default_group(grid, launch));
  }
  int current = 0;
  for (uint64_t width = kBlock; width < static_cast<uint64_t>(length); width *= 2) {
    p.width = static_cast<uint32_t>(width);
    KernelLaunch launch(shader_kernel(kShaderFile, "sort_merge_" + suffix));
    const device::Size3 grid{(static_cast<uint64_t>(length) + 2 * width - 1) / (2 * width),
                             static_cast<uint64_t>(lines), 1};
    launch.tensor(0, *work_values[current]).tensor(1, *work_indices[current])
        .tensor(2, *work_values[1 - current]).tensor(3, *work_indices[1 - current]).value(4, p)
        .threads(grid, default_group(grid, launch));
    current = 1 - current;
  }
  if (count > 0) {
    KernelLaunch launch(shader_kernel(kShaderFile, "sort_store_" + suffix));
    const device::Size3 grid{static_cast<uint64_t>(count), static_cast<uint64_t>(lines), 1};
    launch.tensor(0, *work_values[current]).tensor(1, *work_indices[current])
        .tensor(2, *result.values).tensor(3, *result.indices).value(4, p)
        .threads(grid, default_group(grid, launch));
  }
  return result;
}

}  // namespace

SortOutputs sort(const Tensor& self, int64_t dim, bool descending) {
  const int64_t n = self.dim();
  const int64_t wrap = std::max<int64_t>(n, 1);
  const int64_t wrapped = dim < 0 ? dim + wrap : dim;
  const int64_t length = (n == 0 || wrapped < 0 || wrapped >= n) ? 1 : self.sizes[wrapped];
  return sort_lines("sort", self, dim, descending, length);
}

SortOutputs topk(const Tensor& self, int64_t k, int64_t dim, bool largest) {
  return sort_lines("topk", self, dim, largest, k);
}

SortOutputs kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  constexpr const char* op = "kthvalue";
  const int64_t n = self.dim();
  const int64_t wrapped = wrap_dim(op, dim, n);
  const int64_t length = n == 0 ? 1 : self.sizes[wrapped];
  ETM_REQUIRE(k >= 1 && k <= length, op, ": selected number k out of range for dimension ", wrapped,
              " (k = ", k, ", size ", length, ")");
  SortOutputs result = sort_lines(op, self, wrapped, false, 1, StoreFrom::first, k - 1);
  if (!keepdim && n > 0) {
    for (Tensor* t : {result.values.get(), result.indices.get()}) {
      t->sizes.erase(t->sizes.begin() + wrapped);
      t->strides.erase(t->strides.begin() + wrapped);
    }
  }
  return result;
}

std::unique_ptr<Tensor> median(const Tensor& self, bool ignore_nan) {
  const char* op = ignore_nan ? "nanmedian" : "median";
  require_mps(op, "self", self);
  ETM_REQUIRE(self.numel() > 0, op, ": the median of an empty tensor is not supported");
  // All elements as one line: a flat view of a contiguous self, else a contiguous copy.
  Tensor flat = self;
  if (!self.is_contiguous()) {
    Runtime& runtime = Runtime::get();
    std::unique_ptr<Tensor> copy = runtime.empty_tensor(self.sizes, contiguous_strides(self.sizes), self.dtype);
    runtime.copy_tensor(*copy, self);
    flat = *copy;
  }
  flat.sizes = {self.numel()};
  flat.strides = {1};
  SortOutputs result = sort_lines(op, flat, 0, false, 1, ignore_nan ? StoreFrom::nan_median : StoreFrom::median);
  result.values->sizes.clear();
  result.values->strides.clear();
  return std::move(result.values);
}

}  // namespace etm::ops
