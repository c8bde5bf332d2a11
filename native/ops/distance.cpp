#include "ops/distance.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/distance.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

enum Norm : uint32_t { kZero = 0, kOne = 1, kTwo = 2, kInfinity = 3, kGeneral = 4 };

// Threadgroups of the kernels' blocks along `rows` rows.
uint64_t blocks(int64_t rows) { return (uint64_t(rows) + kDistanceBlock - 1) / kDistanceBlock; }

// The stride of `t`'s batch dimension `d` of `batch_dims` broadcast batch dimensions (0 where t
// has none there or size 1).
int64_t batch_stride(const Tensor& t, int64_t d, int64_t batch_dims) {
  const int64_t own = d - (batch_dims - (t.dim() - 2));
  return own < 0 || t.sizes[own] == 1 ? 0 : t.strides[own];
}

// The norm kernels compute for p.
uint32_t norm_of(double p) {
  return p == 0 ? kZero : p == 1 ? kOne : p == 2 ? kTwo : std::isinf(p) ? kInfinity : kGeneral;
}

}  // namespace

std::unique_ptr<Tensor> cdist(const Tensor& x1, const Tensor& x2, double p, std::optional<int64_t> compute_mode) {
  constexpr const char* op = "_cdist_forward";
  require_mps(op, "x1", x1);
  require_mps(op, "x2", x2);
  const char* type = msl_float_type_name(x1.dtype);
  ETM_REQUIRE(type, op, ": cdist only supports floating-point dtypes (float32, float16, bfloat16), X1 got: ",
              dtype_name(x1.dtype));
  ETM_REQUIRE(x1.dtype == x2.dtype, op, ": X1 and X2 must have the same dtype, X1 got: ", dtype_name(x1.dtype),
              ", X2 got: ", dtype_name(x2.dtype));
  ETM_REQUIRE(x1.dim() >= 2, op, ": cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  ETM_REQUIRE(x2.dim() >= 2, op, ": cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  const int64_t columns = x1.sizes.back();
  ETM_REQUIRE(columns == x2.sizes.back(), op, ": X1 and X2 must have the same number of columns. X1: ", columns,
              " X2: ", x2.sizes.back());
  ETM_REQUIRE(p >= 0, op, ": cdist only supports non-negative p values");
  ETM_REQUIRE(!compute_mode || (*compute_mode >= 0 && *compute_mode <= 2), op,
              ": possible modes: None, 1, 2, but was: ", compute_mode ? *compute_mode : 0);
  const int64_t batch_dims = std::max(x1.dim(), x2.dim()) - 2;
  ETM_REQUIRE(batch_dims <= kCdistMaxBatchDims, op, ": at most ", kCdistMaxBatchDims, " batch dimensions are supported, got ",
              batch_dims);
  CdistParams params{};
  std::vector<int64_t> out_sizes;
  int64_t batches = 1;
  for (int64_t d = 0; d < batch_dims; ++d) {
    const int64_t own1 = d - (batch_dims - (x1.dim() - 2)), own2 = d - (batch_dims - (x2.dim() - 2));
    const int64_t size1 = own1 < 0 ? 1 : x1.sizes[own1], size2 = own2 < 0 ? 1 : x2.sizes[own2];
    ETM_REQUIRE(size1 == size2 || size1 == 1 || size2 == 1, op, ": the batch dimensions of X1 ",
                shape_text(x1.sizes), " and X2 ", shape_text(x2.sizes), " do not broadcast");
    const int64_t size = size1 == 1 ? size2 : size1;
    out_sizes.push_back(size);
    batches *= size;
    params.batch_sizes[d] = checked_u32(op, size, "batch size");
    params.x1_batch_strides[d] = batch_stride(x1, d, batch_dims);
    params.x2_batch_strides[d] = batch_stride(x2, d, batch_dims);
  }
  const int64_t rows1 = x1.sizes[x1.dim() - 2], rows2 = x2.sizes[x2.dim() - 2];
  out_sizes.push_back(rows1);
  out_sizes.push_back(rows2);
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), x1.dtype);
  if (out->numel() == 0) return out;
  params.batch_dims = static_cast<uint32_t>(batch_dims);
  params.x1_strides[0] = x1.strides[x1.dim() - 2];
  params.x1_strides[1] = x1.strides[x1.dim() - 1];
  params.x2_strides[0] = x2.strides[x2.dim() - 2];
  params.x2_strides[1] = x2.strides[x2.dim() - 1];
  params.rows1 = checked_u32(op, rows1, "row count of X1");
  params.rows2 = checked_u32(op, rows2, "row count of X2");
  params.columns = checked_u32(op, columns, "column count");
  checked_u32(op, batches, "batch count");
  checked_u32(op, out->numel(), "number of output elements");
  params.p = static_cast<float>(p);
  params.norm = norm_of(p);
  KernelLaunch launch(shader_kernel("distance.metal", std::string("cdist_") + type));
  launch.tensor(0, x1).tensor(1, x2).tensor(2, *out).value(3, params);
  launch.threadgroups({blocks(rows2), blocks(rows1), static_cast<uint64_t>(batches)},
                      {kDistanceSide, kDistanceSide, 1});
  return out;
}

// Called by the generated shim of aoti_torch_mps__pdist_forward (native/forwarding_shims.py).
std::unique_ptr<Tensor> _pdist_forward(const Tensor& self, double p) {
  constexpr const char* op = "_pdist_forward";
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() == 2, op, ": pdist only supports 2D tensors, got: ", self.dim(), "D");
  const char* type = msl_float_type_name(self.dtype);
  ETM_REQUIRE(type, op, ": pdist only supports floating-point dtypes (float32, float16, bfloat16), got: ",
              dtype_name(self.dtype));
  ETM_REQUIRE(p >= 0, op, ": pdist only supports non-negative p values");
  const int64_t rows = self.sizes[0];
  const std::vector<int64_t> out_sizes{rows > 1 ? rows * (rows - 1) / 2 : 0};
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  if (out->numel() == 0) return out;
  PdistParams params{};
  params.strides[0] = self.strides[0];
  params.strides[1] = self.strides[1];
  params.rows = checked_u32(op, rows, "row count");
  params.columns = checked_u32(op, self.sizes[1], "column count");
  params.p = static_cast<float>(p);
  params.norm = norm_of(p);
  KernelLaunch launch(shader_kernel("distance.metal", std::string("pdist_") + type));
  launch.tensor(0, self).tensor(1, *out).value(2, params);
  launch.threadgroups({blocks(rows), blocks(rows), 1}, {kDistanceSide, kDistanceSide, 1});
  return out;
}

}  // namespace etm::ops
