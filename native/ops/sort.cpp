#include "ops/sort.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/sort.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "sort.metal";
// Must match the constants and tile sizes of shaders/sort.metal.
constexpr uint32_t kSortTile = 2048;      // elements a threadgroup sorts before merging
constexpr uint32_t kLongSortTile = 1024;  // the same, for int64 (64-bit keys)
constexpr uint32_t kTileRun = 8;          // elements a tile-sorting thread keeps in registers
constexpr uint32_t kMergeRun = 32;        // outputs per merge thread
constexpr uint32_t kTopkPerThread = 8;
constexpr int64_t kTopkMaxK = 256;
constexpr uint32_t kTopkGroup = 256;      // threads per threadgroup, at least (with the GPU shape)...
constexpr uint32_t kTopkMaxGroup = 1024;  // ...and at most (the kernels keep 32 SIMD-group totals)

// Contiguous values and int64 indices shaped like self with `count` elements along dim.
SortOutputs empty_outputs(const Tensor& self, int64_t dim, int64_t count) {
  std::vector<int64_t> sizes = self.sizes;
  if (!sizes.empty()) sizes[dim] = count;
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  Runtime& runtime = Runtime::get();
  SortOutputs outputs;
  outputs.values = runtime.empty_tensor(sizes, strides, self.dtype);
  outputs.indices = runtime.empty_tensor(sizes, strides, static_cast<int32_t>(DType::int64));
  return outputs;
}

// Sorts every line of `self` along `dim` and keeps the first `count` elements of each.
SortOutputs sort_lines(const char* op, const Tensor& self, int64_t dim, bool descending,
                       int64_t count) {
  require_mps(op, "self", self);
  const char* type_name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(type_name, op, ": dtype ", dtype_name(self.dtype), " is not supported");
  const int64_t n = self.dim();
  dim = wrap_dim(op, dim, n);
  const int64_t length = n == 0 ? 1 : self.sizes[dim];
  ETM_REQUIRE(count >= 0 && count <= length, op, ": k = ", count, " is out of range for ", length,
              " elements along dim ", dim);

  Runtime& runtime = Runtime::get();
  SortOutputs result = empty_outputs(self, dim, count);

  SortParams p{};
  const int64_t lines = lay_out_lines(op, self, dim, result.values->strides, p.layout);
  if (lines == 0) return result;
  p.lines = checked_u32(op, lines, "number of lines");
  checked_u32(op, lines * length, "element count");
  p.count = static_cast<uint32_t>(count);
  p.descending = descending ? 1 : 0;

  if (count == 0) return result;

  const std::string suffix = type_name;
  KernelFunction& tiles_kernel = shader_kernel(kShaderFile, "sort_tiles_" + suffix);
  const bool is_long = self.dtype == static_cast<int32_t>(DType::int64);
  const uint32_t tile = is_long ? kLongSortTile : kSortTile;
  // kTileRun elements a thread; the threads' share of a tile must be a power of two.
  uint32_t group = 1;
  while (group * kTileRun < std::min(p.layout.length, tile)) group *= 2;
  ETM_REQUIRE(group <= tiles_kernel.max_threads_per_group(), op, ": the device allows only ",
              tiles_kernel.max_threads_per_group(), " threads per threadgroup (", group, " needed)");
  const uint64_t tiles = (static_cast<uint64_t>(length) + tile - 1) / tile;
  if (tiles == 1) {
    KernelLaunch launch(tiles_kernel);
    launch.tensor(0, self).tensor(1, *result.values).tensor(2, *result.indices)
        .tensor(3, *result.values).tensor(4, *result.indices).value(5, p)
        .threadgroups({1, static_cast<uint64_t>(lines), 1}, {group, 1, 1});
    return result;
  }
  const std::vector<int64_t> work_sizes = {lines * length};
  std::unique_ptr<Tensor> work_values[2], work_indices[2];
  for (int i = 0; i < 2; ++i) {
    work_values[i] = runtime.empty_tensor(work_sizes, {1}, self.dtype);
    work_indices[i] = runtime.empty_tensor(work_sizes, {1}, static_cast<int32_t>(DType::int32));
  }
  {
    KernelLaunch launch(tiles_kernel);
    launch.tensor(0, self).tensor(1, *work_values[0]).tensor(2, *work_indices[0])
        .tensor(3, *result.values).tensor(4, *result.indices).value(5, p)
        .threadgroups({tiles, static_cast<uint64_t>(lines), 1}, {group, 1, 1});
  }
  int current = 0;
  for (uint64_t width = tile; width < static_cast<uint64_t>(length); width *= 2) {
    p.width = static_cast<uint32_t>(width);
    const bool final = 2 * width >= static_cast<uint64_t>(length);
    KernelLaunch launch(shader_kernel(kShaderFile, (final ? "sort_merge_final_" : "sort_merge_") + suffix));
    const device::Size3 grid{(static_cast<uint64_t>(length) + kMergeRun - 1) / kMergeRun,
                             static_cast<uint64_t>(lines), 1};
    launch.tensor(0, *work_values[current]).tensor(1, *work_indices[current])
        .tensor(2, final ? *result.values : *work_values[1 - current])
        .tensor(3, *work_indices[1 - current]).value(4, p).tensor(5, *result.indices)
        .threads(grid, default_group(grid, launch));
    current = 1 - current;
  }
  return result;
}

// Radix-selection top-k (shaders/sort.metal) for 1 <= k <= min(kTopkMaxK, length): chunk
// passes shrink every line to k candidates per chunk until one threadgroup holds them all,
// then a final pass selects and orders the k winners.
SortOutputs topk_by_selection(const Tensor& self, const char* type_name, int64_t k, int64_t dim,
                              bool largest) {
  constexpr const char* op = "topk";
  Runtime& runtime = Runtime::get();
  SortOutputs result = empty_outputs(self, dim, k);

  TopkParams p{};
  const int64_t lines = lay_out_lines(op, self, dim, result.values->strides, p.layout);
  if (lines == 0) return result;
  const int64_t length = p.layout.length;
  p.lines = checked_u32(op, lines, "number of lines");
  p.k = static_cast<uint32_t>(k);
  p.largest = largest ? 1 : 0;
  p.count = checked_u32(op, length, "length");

  const std::string suffix = type_name;
  KernelFunction& chunks_kernel = shader_kernel(kShaderFile, "topk_chunks_" + suffix);
  KernelFunction& final_kernel = shader_kernel(kShaderFile, "topk_final_" + suffix);
  // Whole SIMD-groups of 32 (the kernels' digit search uses one). A chunk pass writes k
  // candidates of 8 bytes (key, index) per chunk, which the next pass reads again: with the GPU
  // shape, groups grow with k until that is about a tenth of the input's bytes (chunk >= 160 k /
  // element size). The CPU device keeps kTopkGroup threads and runs another candidate pass
  // instead: it runs these kernels on fibers (every thread switched in at every barrier), and
  // groups of 1,024 took 1.36x the CPU time of groups of 256 there (k = 256 of 4 x 128,256
  // float32) for about as many threads in all, most likely because 1,024 fiber stacks outgrow
  // a core's caches where 256 fit.
  const uint64_t wanted = launch_shape() == LaunchShape::gpu ? (20 * uint64_t(k) / self.itemsize() + 31) / 32 * 32
                                                             : kTopkGroup;
  const uint32_t group = std::min<uint32_t>(
      static_cast<uint32_t>(std::clamp<uint64_t>(wanted, kTopkGroup, kTopkMaxGroup)),
      std::min(chunks_kernel.max_threads_per_group(), final_kernel.max_threads_per_group()) / 32 * 32);
  ETM_REQUIRE(group >= 32, op, ": the device allows only ", group, " threads per threadgroup (32 needed)");
  p.chunk = group * kTopkPerThread;
  if (p.chunk < 4 * p.k) return sort_lines(op, self, dim, largest, k);  // chunks would barely shrink a line

  const int32_t key_dtype = static_cast<int32_t>(self.dtype == static_cast<int32_t>(DType::int64) ? DType::int64
                                                                                                 : DType::int32);
  std::shared_ptr<Tensor> keys[2], indices[2];
  int current = -1;  // candidate buffers the next pass reads; -1: the input
  while (p.count > p.chunk) {
    const uint32_t chunks = (p.count + p.chunk - 1) / p.chunk;
    const uint32_t last = p.count - (chunks - 1) * p.chunk;
    const int target = current == 0 ? 1 : 0;
    p.target_stride = checked_u32(op, int64_t{chunks} * p.k, "candidates per line");
    if (!keys[target] || keys[target]->numel() < lines * p.target_stride) {
      keys[target] = runtime.empty_tensor({lines * p.target_stride}, {1}, key_dtype);
      indices[target] = runtime.empty_tensor({lines * p.target_stride}, {1}, static_cast<int32_t>(DType::int32));
    }
    p.from_candidates = current >= 0 ? 1 : 0;
    KernelLaunch launch(chunks_kernel);
    const Tensor& source_keys = current >= 0 ? *keys[current] : self;
    const Tensor& source_indices = current >= 0 ? *indices[current] : self;
    launch.tensor(0, self).tensor(1, source_keys).tensor(2, source_indices)
        .tensor(3, *keys[target]).tensor(4, *indices[target]).value(5, p)
        .threadgroups({chunks, static_cast<uint64_t>(lines), 1}, {group, 1, 1});
    p.count = (chunks - 1) * p.k + std::min(p.k, last);
    p.source_stride = p.target_stride;
    current = target;
  }
  p.from_candidates = current >= 0 ? 1 : 0;
  KernelLaunch launch(final_kernel);
  launch.tensor(0, self).tensor(1, current >= 0 ? *keys[current] : self)
      .tensor(2, current >= 0 ? *indices[current] : self)
      .tensor(3, *result.values).tensor(4, *result.indices).value(5, p)
      .threadgroups({static_cast<uint64_t>(lines), 1, 1}, {group, 1, 1});
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

SortOutputs sort_bounded_keys(const Tensor& keys, int64_t lines, int64_t length, int64_t bound) {
  constexpr const char* op = "sort_bounded_keys";
  const auto int32 = static_cast<int32_t>(DType::int32);
  ETM_REQUIRE(keys.dtype == int32 && keys.numel() == lines * length && bound >= 1 && bound <= INT32_MAX, op,
              ": expected ", lines, " x ", length, " int32 keys below ", bound);
  Runtime& runtime = Runtime::get();
  const std::vector<int64_t> sizes = {lines * length};
  SortOutputs result;
  result.values = runtime.empty_tensor(sizes, {1}, int32);
  result.indices = runtime.empty_tensor(sizes, {1}, int32);
  if (lines * length == 0) return result;
  RadixSortParams p{};
  p.length = checked_u32(op, length, "keys per line");
  checked_u32(op, lines * length, "number of keys");
  p.blocks = (p.length + kRadixBlock - 1) / kRadixBlock;
  uint32_t bits = 1;  // of key + 1, in [0, bound]
  while ((int64_t{1} << bits) <= bound) ++bits;
  const uint32_t passes = (bits + kRadixMaxDigitBits - 1) / kRadixMaxDigitBits;
  p.digit_bits = (bits + passes - 1) / passes;
  KernelFunction& count_kernel = shader_kernel(kShaderFile, "radix_count");
  KernelFunction& offsets_kernel = shader_kernel(kShaderFile, "radix_offsets");
  KernelFunction& scatter_kernel = shader_kernel(kShaderFile, "radix_scatter");
  const uint32_t threads = std::min({count_kernel.max_threads_per_group(), offsets_kernel.max_threads_per_group(),
                                     scatter_kernel.max_threads_per_group()});
  ETM_REQUIRE(threads >= kRadixGroup, op, ": the device allows only ", threads, " threads per threadgroup (",
              kRadixGroup, " needed)");
  auto counts = runtime.empty_tensor({lines * (int64_t{1} << p.digit_bits) * p.blocks}, {1}, int32);
  std::unique_ptr<Tensor> work_keys, work_positions;
  if (passes > 1) {
    work_keys = runtime.empty_tensor(sizes, {1}, int32);
    work_positions = runtime.empty_tensor(sizes, {1}, int32);
  }
  const device::Size3 blocks{p.blocks, static_cast<uint64_t>(lines), 1}, group{kRadixGroup, 1, 1};
  const Tensor* source_keys = &keys;
  const Tensor* source_positions = &keys;  // unread by the first pass
  for (uint32_t pass = 0; pass < passes; ++pass) {
    p.shift = pass * p.digit_bits;
    p.first_pass = pass == 0 ? 1 : 0;
    // Passes alternate between the work buffers and the results, so that the last one ends there.
    const bool into_result = (passes - 1 - pass) % 2 == 0;
    const Tensor& target_keys = into_result ? *result.values : *work_keys;
    const Tensor& target_positions = into_result ? *result.indices : *work_positions;
    KernelLaunch(count_kernel).tensor(0, *source_keys).tensor(1, *counts).value(2, p).threadgroups(blocks, group);
    KernelLaunch(offsets_kernel).tensor(0, *counts).value(1, p)
        .threadgroups({static_cast<uint64_t>(lines), 1, 1}, group);
    KernelLaunch(scatter_kernel).tensor(0, *source_keys).tensor(1, *source_positions).tensor(2, target_keys)
        .tensor(3, target_positions).tensor(4, *counts).value(5, p).threadgroups(blocks, group);
    source_keys = &target_keys;
    source_positions = &target_positions;
  }
  return result;
}

SortOutputs topk(const Tensor& self, int64_t k, int64_t dim, bool largest) {
  constexpr const char* op = "topk";
  require_mps(op, "self", self);
  const char* type_name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(type_name, op, ": dtype ", dtype_name(self.dtype), " is not supported");
  const int64_t n = self.dim();
  const int64_t wrapped = wrap_dim(op, dim, n);
  const int64_t length = n == 0 ? 1 : self.sizes[wrapped];
  // Radix selection keeps the k winners in threadgroup arrays; larger k sort the whole line.
  if (k < 1 || k > kTopkMaxK || k > length) return sort_lines(op, self, dim, largest, k);
  return topk_by_selection(self, type_name, k, wrapped, largest);
}

SortOutputs kthvalue(const Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  constexpr const char* op = "kthvalue";
  const int64_t n = self.dim();
  const int64_t wrapped = wrap_dim(op, dim, n);
  const int64_t length = n == 0 ? 1 : self.sizes[wrapped];
  ETM_REQUIRE(k >= 1 && k <= length, op, ": selected number k out of range for dimension ", wrapped,
              " (k = ", k, ", size ", length, ")");
  // The k-th smallest is position k - 1 of the ascending sort: the results are views of it.
  SortOutputs result = sort_lines(op, self, wrapped, false, length);
  for (Tensor* t : {result.values.get(), result.indices.get()}) {
    if (n == 0) continue;
    t->storage_offset += (k - 1) * t->strides[wrapped];
    t->sizes[wrapped] = 1;
    if (!keepdim) {
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
  const char* type_name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(type_name, op, ": dtype ", dtype_name(self.dtype), " is not supported");
  // All elements as one line: a flat view of a contiguous self, else a contiguous copy.
  Runtime& runtime = Runtime::get();
  Tensor flat = self;
  if (!self.is_contiguous()) {
    std::unique_ptr<Tensor> copy = runtime.empty_tensor(self.sizes, contiguous_strides(self.sizes), self.dtype);
    runtime.copy_tensor(*copy, self);
    flat = *copy;
  }
  flat.sizes = {self.numel()};
  flat.strides = {1};
  const SortOutputs sorted = sort_lines(op, flat, 0, false, self.numel());
  std::unique_ptr<Tensor> result = runtime.empty_tensor({}, {}, self.dtype);
  KernelLaunch launch(shader_kernel(kShaderFile, std::string("sort_median_") + type_name));
  launch.tensor(0, *sorted.values).tensor(1, *result)
      .value(2, checked_u32(op, self.numel(), "element count")).value(3, uint32_t(ignore_nan ? 1 : 0))
      .threads({1, 1, 1}, {1, 1, 1});
  return result;
}

}  // namespace etm::ops
