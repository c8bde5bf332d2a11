#include "ops/normalization.h"

#include <algorithm>
#include <limits>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/normalization.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "_fused_rms_norm";
constexpr const char* kShaderFile = "normalization.metal";
// Must match the constants of shaders/normalization.metal.
constexpr int64_t kPerThread = 16;
constexpr int64_t kRun = 4;
constexpr int64_t kMaxGroupThreads = 1024;
// Rows below this get kRun elements per thread (the most threads a row can use); more rows
// fill the device with threadgroups, and a thread keeps up to kPerThread elements.
constexpr int64_t kFewRows = 16;
// Threadgroups wanted when there are many rows: each loads the weight once for its rows.
constexpr int64_t kTargetGroups = 64;
// Those weight loads past the first stay within this share of the op's minimum traffic (input,
// weight and output once, rstd): fewer rows get fewer, fuller threadgroups (8 x 4096 half:
// 4 groups of 1024 threads, 1.18x the minimum bytes, instead of 8 groups at 1.41x).
constexpr double kWeightReloadShare = 0.2;

}  // namespace

RmsNormOutputs fused_rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape,
                              const Tensor* weight, std::optional<double> eps) {
  require_mps(kOp, "input", input);
  const char* type_name = msl_float_type_name(input.dtype);
  ETM_REQUIRE(type_name, kOp, ": input dtype ", dtype_name(input.dtype),
              " is not supported (float32, float16, bfloat16)");
  const int64_t n = input.dim();
  const int64_t normalized = static_cast<int64_t>(normalized_shape.size());
  ETM_REQUIRE(normalized >= 1 && normalized <= n, kOp, ": normalized_shape has ", normalized,
              " dimensions; it needs 1 to the input's ", n);
  const int64_t leading = n - normalized;
  for (int64_t d = 0; d < normalized; ++d) {
    ETM_REQUIRE(input.sizes[leading + d] == normalized_shape[d], kOp,
                ": normalized_shape does not match the input's trailing sizes (dimension ",
                leading + d, ": ", normalized_shape[d], " vs ", input.sizes[leading + d], ")");
  }
  ETM_REQUIRE(leading <= kNormalizationMaxDims, kOp, ": at most ", kNormalizationMaxDims, " leading dimensions are supported");
  if (weight) {
    require_mps(kOp, "weight", *weight);
    ETM_REQUIRE(weight->sizes == normalized_shape, kOp, ": weight must have shape normalized_shape");
    ETM_REQUIRE(weight->dtype == input.dtype, kOp, ": weight dtype ", dtype_name(weight->dtype),
                " differs from the input's ", dtype_name(input.dtype));
  }

  RmsNormParams p{};
  p.eps = static_cast<float>(eps ? *eps : std::numeric_limits<float>::epsilon());
  p.has_weight = weight ? 1 : 0;
  int64_t rows = 1, columns = 1;
  for (int64_t d = 0; d < leading; ++d) {
    p.input_row_strides[d] = input.strides[d];
    p.row_sizes[d] = checked_u32(kOp, input.sizes[d], "size");
    rows *= input.sizes[d];
  }
  p.row_dims = static_cast<uint32_t>(leading);
  // Normalized dimensions that are one run of memory in both input and weight merge into
  // one, so the usual contiguous row takes the kernel's single-stride path.
  for (int64_t d = leading; d < n; ++d) {
    const int64_t size = input.sizes[d];
    const int64_t weight_stride = weight ? weight->strides[d - leading] : 0;
    columns *= size;
    if (size == 1) continue;
    const uint32_t last = p.column_dims;
    if (last > 0 && p.input_column_strides[last - 1] == input.strides[d] * size &&
        p.weight_column_strides[last - 1] == weight_stride * size) {
      p.column_sizes[last - 1] = checked_u32(kOp, int64_t{p.column_sizes[last - 1]} * size, "row length");
      p.input_column_strides[last - 1] = input.strides[d];
      p.weight_column_strides[last - 1] = weight_stride;
      continue;
    }
    ETM_REQUIRE(last < kNormalizationMaxDims, kOp, ": too many non-mergeable normalized dimensions");
    p.column_sizes[last] = checked_u32(kOp, size, "size");
    p.input_column_strides[last] = input.strides[d];
    p.weight_column_strides[last] = weight_stride;
    ++p.column_dims;
  }
  if (p.column_dims == 0) {  // every normalized size is 1
    p.column_sizes[0] = 1;
    p.column_dims = 1;
  }
  p.rows = checked_u32(kOp, rows, "number of rows");
  p.columns = checked_u32(kOp, columns, "row length");

  std::vector<int64_t> rstd_sizes(input.sizes.begin(), input.sizes.begin() + leading);
  rstd_sizes.resize(static_cast<size_t>(n), 1);
  Runtime& runtime = Runtime::get();
  RmsNormOutputs result;
  result.output = runtime.empty_tensor(input.sizes, contiguous_strides(input.sizes), input.dtype);
  result.rstd = runtime.empty_tensor(rstd_sizes, contiguous_strides(rstd_sizes),
                                     static_cast<int32_t>(DType::float32));
  if (rows == 0) return result;
  // Without elements the output is empty and nothing is read: bind rstd in the other slots.
  const Tensor& input_bound = columns > 0 ? input : *result.rstd;
  const Tensor& output_bound = columns > 0 ? *result.output : *result.rstd;
  const Tensor& weight_bound = weight && columns > 0 ? *weight : input_bound;
  {
    KernelLaunch launch(shader_kernel(kShaderFile, std::string("rms_norm_") + type_name));
    const int64_t per_thread = rows < kFewRows ? kRun : kPerThread;
    const int64_t wanted = (std::max<int64_t>(columns, 1) + per_thread - 1) / per_thread;
    const int64_t limit = std::min<int64_t>(kMaxGroupThreads, launch.max_threads_per_group()) / 32 * 32;
    const int64_t threads = std::clamp<int64_t>((wanted + 31) / 32 * 32, 32, limit);
    int64_t rows_per_group = std::max<int64_t>(1, rows / kTargetGroups);
    if (weight && columns > 0) {
      const int64_t weight_bytes = columns * static_cast<int64_t>(element_size(input.dtype));
      const double minimum_bytes = static_cast<double>((2 * rows + 1) * weight_bytes + rows * 4);
      const int64_t most_groups = 1 + static_cast<int64_t>(kWeightReloadShare * minimum_bytes / weight_bytes);
      rows_per_group = std::max(rows_per_group, (rows + most_groups - 1) / most_groups);
    }
    p.rows_per_group = static_cast<uint32_t>(rows_per_group);
    launch.tensor(0, input_bound).tensor(1, weight_bound).tensor(2, output_bound)
        .tensor(3, *result.rstd).value(4, p)
        .threadgroups({static_cast<uint64_t>((rows + rows_per_group - 1) / rows_per_group), 1, 1},
                      {static_cast<uint64_t>(threads), 1, 1});
  }
  return result;
}

}  // namespace etm::ops
