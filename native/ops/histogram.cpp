#include "ops/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/histogram.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "histc";
constexpr const char* kShaderFile = "histogram.metal";
constexpr uint64_t kRangeThreads = 256;  // kRangeThreads in the shader
// The range passes (histc's and histogram's) and histc's count pass: each threadgroup takes
// at least kGroupElements elements, and in the count pass 16 per bin (each threadgroup adds
// its bins to the device counters: with fewer elements per bin that merge would cost more
// than reading the input), in at most kMaxGroups threadgroups (whose partial results the next
// step combines).
constexpr uint64_t kGroupElements = 8192;
constexpr uint64_t kElementsPerBin = 16;
constexpr uint64_t kMaxGroups = 4096;

// Threadgroups for `elements` elements, `group_elements` or more a threadgroup.
uint32_t groups_for(uint64_t elements, uint64_t group_elements) {
  return static_cast<uint32_t>(std::min(kMaxGroups, (elements + group_elements - 1) / group_elements));
}

std::string range_text(double low, double high) {
  return "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
}

// A histogram's points: `rows` of `columns` coordinates, and the optional weight per point.
struct Points {
  const Tensor& self;
  std::vector<int64_t> row_sizes;
  std::vector<int64_t> row_strides;
  int64_t column_stride;
  int64_t columns;
  const Tensor* weight;
};

void pack_dims(const char* op, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
               uint32_t* packed_sizes, int64* packed_strides, uint32_t& dims) {
  ETM_REQUIRE(sizes.size() <= kHistogramMaxDims, op, ": at most ", kHistogramMaxDims, " dimensions are supported, not ",
              sizes.size());
  dims = static_cast<uint32_t>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    packed_sizes[d] = checked_u32(op, sizes[d], "size");
    packed_strides[d] = strides[d];
  }
}

HistogramOutputs histogram_of_points(const char* op, const Points& points, const std::vector<int64_t>& bins,
                                     const std::optional<std::vector<double>>& range, bool density) {
  const Tensor& self = points.self;
  const int64_t columns = points.columns;
  ETM_REQUIRE(self.dtype == static_cast<int32_t>(DType::float32), op, ": input dtype ",
              dtype_name(self.dtype), " is not supported (float32)");
  if (points.weight) {
    require_mps(op, "weight", *points.weight);
    ETM_REQUIRE(points.weight->dtype == self.dtype, op, ": input tensor and weight tensor should have the ",
                "same dtype, but got input ", dtype_name(self.dtype), " and weight ",
                dtype_name(points.weight->dtype));
  }
  ETM_REQUIRE(static_cast<int64_t>(bins.size()) == columns, op, ": expected ", columns,
              " bin counts for a ", columns, "-dimensional histogram but got ", bins.size());
  ETM_REQUIRE(columns <= kHistogramMaxDims, op, ": at most ", kHistogramMaxDims, " coordinates are supported, not ", columns);
  HistogramParams p{};
  int64_t hist_numel = 1, edge_count = 0;
  for (int64_t k = 0; k < columns; ++k) {
    ETM_REQUIRE(bins[k] > 0, op, ": bins must be > 0, but got ", bins[k], " for dimension ", k);
    p.bins[k] = checked_u32(op, bins[k], "bins");
    p.edge_offsets[k] = checked_u32(op, edge_count, "number of edges");
    edge_count += bins[k] + 1;
    hist_numel *= bins[k];
    checked_u32(op, hist_numel, "number of bins");
  }
  if (range) {
    ETM_REQUIRE(static_cast<int64_t>(range->size()) == 2 * columns, op, ": for a ", columns,
                "-dimensional histogram range should have ", 2 * columns, " elements, but got ",
                range->size());
    for (int64_t k = 0; k < columns; ++k) {
      double low = (*range)[2 * k], high = (*range)[2 * k + 1];
      ETM_REQUIRE(std::isfinite(low) && std::isfinite(high), op, ": dimension ", k, "'s range ",
                  range_text(low, high), " is not finite");
      ETM_REQUIRE(low <= high, op, ": min should not exceed max, but got min ", low, " max ", high,
                  " for dimension ", k);
      if (low == high) {
        low -= 0.5;
        high += 0.5;
      }
      p.low[k] = static_cast<float>(low);
      p.high[k] = static_cast<float>(high);
      ETM_REQUIRE(p.low[k] < p.high[k], op, ": dimension ", k, "'s range ", range_text(low, high),
                  " is empty in float32");
    }
  }
  p.data_range = range ? 0 : 1;
  p.column_stride = points.column_stride;
  p.columns = static_cast<uint32_t>(columns);
  p.hist_numel = static_cast<uint32_t>(hist_numel);
  pack_dims(op, points.row_sizes, points.row_strides, p.sizes, p.strides, p.dims);
  const int64_t rows = std::accumulate(points.row_sizes.begin(), points.row_sizes.end(), int64_t{1},
                                       std::multiplies<int64_t>());
  p.rows = checked_u32(op, rows, "number of points");
  if (points.weight) {
    p.weighted = 1;
    pack_dims(op, points.weight->sizes, points.weight->strides, p.weight_sizes, p.weight_strides,
              p.weight_dims);
  }

  Runtime& runtime = Runtime::get();
  Stream& stream = runtime.current_stream();
  HistogramOutputs out;
  out.hist = runtime.empty_tensor(bins, contiguous_strides(bins), self.dtype);
  out.edges = runtime.empty_tensor({edge_count}, {1}, self.dtype);
  stream.fill_buffer(out.hist->storage->buffer, out.hist->buffer_offset(),
                     static_cast<size_t>(hist_numel) * out.hist->itemsize(), 0);
  // A histogram of no coordinates is one bin that nothing falls into (torch's 0-D result).
  const bool has_edges = columns > 0;
  if (has_edges) {
    // The data's range: partial [min, max] pairs of each coordinate's share of the points.
    const bool data_partials = p.data_range && p.rows > 0;
    const uint32_t groups = data_partials ? groups_for(p.rows, kGroupElements) : 0;
    std::unique_ptr<Tensor> partials;
    if (data_partials) {
      partials = runtime.empty_tensor({2 * int64_t{groups} * columns}, {1}, static_cast<int32_t>(DType::float32));
      KernelLaunch launch(shader_kernel(kShaderFile, "histogram_range_partial"));
      launch.tensor(0, self).tensor(1, *partials).value(2, p)
          .threadgroups({groups, static_cast<uint64_t>(columns), 1}, {kRangeThreads, 1, 1});
    }
    KernelLaunch launch(shader_kernel(kShaderFile, "histogram_edges"));
    // Without partials the kernel reads none: any buffer will do.
    launch.tensor(0, partials ? *partials : *out.edges).tensor(1, *out.edges).value(2, p).value(3, groups);
    if (p.data_range) {
      // The edges' storage outlives this call: the check reads it once the kernels ran.
      launch.completion_check([op, storage = out.edges->storage, first = out.edges->storage_offset, p]() {
        const float* edges = reinterpret_cast<const float*>(storage->data()) + first;
        for (uint32_t k = 0; k < p.columns; ++k) {
          const float low = edges[p.edge_offsets[k]], high = edges[p.edge_offsets[k] + p.bins[k]];
          if (!std::isfinite(low) || !std::isfinite(high)) {
            return std::string(op) + ": dimension " + std::to_string(k) + "'s range " +
                   range_text(low, high) + " is not finite";
          }
        }
        return std::string();
      });
    }
    launch.threads({kRangeThreads * static_cast<uint64_t>(columns), 1, 1}, {kRangeThreads, 1, 1});
  }
  const bool shared_count = !points.weight && hist_numel <= kHistogramSharedBins && edge_count <= kHistogramSharedEdges;
  if (p.rows > 0 && has_edges && shared_count) {
    KernelLaunch launch(shader_kernel(kShaderFile, "histogram_count_shared"));
    const uint32_t groups = groups_for(p.rows, std::max<uint64_t>(kGroupElements, kElementsPerBin * hist_numel));
    launch.tensor(0, self).tensor(1, *out.edges).tensor(2, *out.hist).value(3, p)
        .value(4, static_cast<uint32_t>(edge_count)).threadgroups({groups, 1, 1}, {kRangeThreads, 1, 1});
  } else if (p.rows > 0 && has_edges) {
    KernelLaunch launch(shader_kernel(kShaderFile, "histogram_count"));
    const device::Size3 grid{p.rows, 1, 1};
    launch.tensor(0, self).tensor(1, points.weight ? *points.weight : self).tensor(2, *out.edges)
        .tensor(3, *out.hist).value(4, p).threads(grid, default_group(grid, launch));
  }
  if (density) {
    const uint32_t groups = groups_for(static_cast<uint64_t>(hist_numel), kGroupElements);
    auto partials = runtime.empty_tensor({int64_t{groups}}, {1}, static_cast<int32_t>(DType::float32));
    {
      KernelLaunch launch(shader_kernel(kShaderFile, "histogram_total_partial"));
      launch.tensor(0, *out.hist).tensor(1, *partials).value(2, p)
          .threadgroups({groups, 1, 1}, {kRangeThreads, 1, 1});
    }
    KernelLaunch launch(shader_kernel(kShaderFile, "histogram_density"));
    launch.tensor(0, *out.hist).tensor(1, has_edges ? *out.edges : *out.hist).value(2, p).tensor(3, *partials)
        .value(4, groups).threadgroups({groups, 1, 1}, {kRangeThreads, 1, 1});
  }
  return out;
}

}  // namespace

HistogramOutputs histogram(const Tensor& self, int64_t bins, const std::optional<std::vector<double>>& range,
                           const Tensor* weight, bool density) {
  constexpr const char* op = "histogram";
  require_mps(op, "self", self);
  if (weight) {
    ETM_REQUIRE(weight->numel() == self.numel(), op, ": weight should have as many elements as the ",
                "input (", self.numel(), "), but got weight with shape ", shape_text(weight->sizes));
  }
  // The flat list of self's elements: one coordinate per point, read with self's own layout.
  const Points points{self, self.sizes, self.strides, 0, 1, weight};
  return histogram_of_points(op, points, {bins}, range, density);
}

std::unique_ptr<Tensor> histogramdd_from_bin_cts(const Tensor& self, const std::vector<int64_t>& bins,
                                                 const std::optional<std::vector<double>>& range,
                                                 const Tensor* weight, bool density) {
  constexpr const char* op = "_histogramdd_from_bin_cts";
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() >= 2, op, ": input tensor should have at least 2 dimensions, but got ", self.dim());
  std::vector<int64_t> row_sizes(self.sizes.begin(), self.sizes.end() - 1);
  std::vector<int64_t> row_strides(self.strides.begin(), self.strides.end() - 1);
  if (weight) {
    const std::vector<int64_t> weight_sizes = weight->dim() == 0 ? std::vector<int64_t>{1} : weight->sizes;
    ETM_REQUIRE(weight_sizes == row_sizes, op, ": if weight tensor is provided it should have the same ",
                "shape as the input tensor excluding its innermost dimension, but got input with shape ",
                shape_text(self.sizes), " and weight with shape ", shape_text(weight->sizes));
  }
  const Points points{self, row_sizes, row_strides, self.strides.back(), self.sizes.back(), weight};
  return histogram_of_points(op, points, bins, range, density).hist;
}

std::unique_ptr<Tensor> histc(const Tensor& self, int64_t bins, double min, double max) {
  require_mps(kOp, "self", self);
  const char* suffix = msl_float_type_name(self.dtype);
  ETM_REQUIRE(suffix, kOp, ": input dtype ", dtype_name(self.dtype),
              " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(bins > 0, kOp, ": bins must be > 0, got ", bins);
  ETM_REQUIRE(self.dim() <= kHistogramMaxDims, kOp, ": at most ", kHistogramMaxDims, " dimensions are supported, not ",
              self.dim());
  const bool data_range = min == max;
  if (!data_range) {
    ETM_REQUIRE(std::isfinite(min) && std::isfinite(max), kOp, ": range of ", range_text(min, max),
                " is not finite");
    ETM_REQUIRE(min < max, kOp, ": max must be larger than min");
    ETM_REQUIRE(static_cast<float>(min) < static_cast<float>(max), kOp, ": the range ",
                range_text(min, max), " is empty in float32");
  }
  HistcParams p{};
  p.bins = checked_u32(kOp, bins, "bins");
  p.numel = checked_u32(kOp, self.numel(), "number of elements");
  p.dims = static_cast<uint32_t>(self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    p.sizes[d] = checked_u32(kOp, self.sizes[d], "size");
    p.strides[d] = self.strides[d];
  }

  Runtime& runtime = Runtime::get();
  Stream& stream = runtime.current_stream();
  auto output = runtime.empty_tensor({bins}, {1}, self.dtype);
  if (p.numel == 0) {
    stream.fill_buffer(output->storage->buffer, output->buffer_offset(),
                       static_cast<size_t>(bins) * output->itemsize(), 0);
    return output;
  }
  auto counts = runtime.empty_tensor({bins}, {1}, static_cast<int32_t>(DType::int32));
  // Shared: a completion check may read it after this call returns.
  std::shared_ptr<Tensor> range = runtime.empty_tensor({2}, {1}, static_cast<int32_t>(DType::float32));
  stream.fill_buffer(counts->storage->buffer, counts->buffer_offset(),
                     static_cast<size_t>(bins) * counts->itemsize(), 0);
  const std::string name(suffix);
  if (data_range) {
    const uint32_t groups = groups_for(p.numel, kGroupElements);
    auto partials = runtime.empty_tensor({2 * int64_t{groups}}, {1}, static_cast<int32_t>(DType::float32));
    {
      KernelLaunch launch(shader_kernel(kShaderFile, "histc_range_partial_" + name));
      launch.tensor(0, self).tensor(1, *partials).value(2, p)
          .threadgroups({groups, 1, 1}, {kHistcGroupThreads, 1, 1});
    }
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_range"));
    launch.tensor(0, *partials).tensor(1, *range).value(2, groups)
        .completion_check([range]() -> std::string {
          const float* bounds = reinterpret_cast<const float*>(range->data());
          if (std::isfinite(bounds[0]) && std::isfinite(bounds[1])) return {};
          return std::string(kOp) + ": range of " + range_text(bounds[0], bounds[1]) + " is not finite";
        })
        .threadgroups({1, 1, 1}, {kHistcGroupThreads, 1, 1});
  } else {
    // A fresh buffer no command has used yet: written from the host before any encoding.
    float* bounds = reinterpret_cast<float*>(range->data());
    bounds[0] = static_cast<float>(min);
    bounds[1] = static_cast<float>(max);
  }
  if (p.bins <= kHistcSharedBins) {
    const uint32_t groups = groups_for(p.numel, std::max(kGroupElements, kElementsPerBin * p.bins));
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_count_" + name));
    launch.tensor(0, self).tensor(1, *counts).tensor(2, *range).value(3, p)
        .threadgroups({groups, 1, 1}, {kHistcGroupThreads, 1, 1});
  } else {
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_count_global_" + name));
    const device::Size3 grid{p.numel, 1, 1};
    launch.tensor(0, self).tensor(1, *counts).tensor(2, *range).value(3, p)
        .threads(grid, default_group(grid, launch));
  }
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "histc_store_" + name));
    const device::Size3 grid{p.bins, 1, 1};
    launch.tensor(0, *counts).tensor(1, *output).threads(grid, default_group(grid, launch));
  }
  return output;
}

}  // namespace etm::ops
