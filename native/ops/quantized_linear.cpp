#include "ops/quantized_linear.h"

#include <algorithm>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/quantized.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "quantized.metal";
// Must match the constants of shaders/quantized.metal: qmv threadgroups of kQmvSimdgroups
// simdgroups x kQmvRows output rows, for kQmvBatch activation rows.
constexpr int64_t kQmvRows = 4;
constexpr int64_t kQmvSimdgroups = 32;
constexpr int64_t kQmvBatch = 8;  // larger M: the tiled qmm

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void require_same_dtype(const char* op, const char* what, const Tensor& t, const Tensor& a) {
  ETM_REQUIRE(t.dtype == a.dtype, op, ": ", what, " must have the activation dtype ", dtype_name(a.dtype),
              ", got ", dtype_name(t.dtype));
}

// Validates a [M, K] activation; returns its MSL type name.
const char* check_activation(const char* op, const Tensor& a) {
  require_device_tensor(op, "A", a, 2);
  ETM_REQUIRE(a.sizes[0] <= kMaxInt32Extent && a.sizes[1] <= kMaxInt32Extent, op, ": ",
              "A is too large: ", a.sizes[0], " x ", a.sizes[1]);
  ETM_REQUIRE(a.sizes[1] > 0, op, ": K (A.size(1)) must be positive");
  return activation_type_name(op, "A", a);
}

// Weight rows must be byte streams: consecutive bytes along K.
void require_unit_inner_stride(const char* op, const char* what, const Tensor& t) {
  ETM_REQUIRE(t.sizes[1] <= 1 || t.strides[1] == 1, op, ": ", what,
              " must be contiguous along its last dimension, got strides [", t.strides[0], ", ",
              t.strides[1], "]");
}

// The parameters every variant sets alike: sizes, group size and the activation's strides.
QuantizedMatmulParams activation_params(const Tensor& a, int64_t N, int64_t group_size) {
  QuantizedMatmulParams params{};
  params.M = static_cast<int32_t>(a.sizes[0]);
  params.N = static_cast<int32_t>(N);
  params.K = static_cast<int32_t>(a.sizes[1]);
  params.group_size = static_cast<int32_t>(group_size);
  params.a_stride_m = a.strides[0];
  params.a_stride_k = a.strides[1];
  return params;
}

std::unique_ptr<Tensor> encode(const std::string& tag, const char* type_name, const Tensor& a,
                               const Tensor& weight_bytes, const Tensor& scales,
                               const Tensor& zeros, const QuantizedMatmulParams& params) {
  auto out = Runtime::get().empty_tensor({params.M, params.N}, {params.N, 1}, a.dtype);
  if (params.M == 0 || params.N == 0) return out;
  // The matrix-vector kernel for a few rows, the tiled one for more.
  const bool vector = params.M <= kQmvBatch;
  const std::string name = std::string(vector ? "qmv_" : "qmm_") + tag + "_" + type_name;
  KernelLaunch launch(shader_kernel(kShaderFile, name));
  launch.tensor(0, a).tensor(1, weight_bytes).tensor(2, scales).tensor(3, zeros).tensor(4, *out)
      .value(5, params);
  if (vector) {
    // As many simdgroups as the pipeline allows, up to kQmvSimdgroups (a GPU may allow fewer
    // threads per threadgroup to a kernel that uses many registers).
    const int64_t simdgroups = std::clamp<int64_t>(launch.max_threads_per_group() / 32, 1, kQmvSimdgroups);
    launch.threadgroups({static_cast<uint64_t>(ceil_div(params.M, kQmvBatch)),
                         static_cast<uint64_t>(ceil_div(params.N, simdgroups * kQmvRows)), 1},
                        {32, static_cast<uint64_t>(simdgroups), 1});
  } else {
    // 32 x 64 output tiles, 128 threads.
    launch.threadgroups({static_cast<uint64_t>(ceil_div(params.N, 64)),
                         static_cast<uint64_t>(ceil_div(params.M, 32)), 1},
                        {128, 1, 1});
  }
  return out;
}

}  // namespace

std::unique_ptr<Tensor> linear_fp_act_lowbit_weight(int bits, const Tensor& a, const Tensor& b,
                                                    int64_t group_size, const Tensor& scales,
                                                    const Tensor& zeros) {
  const std::string op_name = "_linear_fp_act_" + std::to_string(bits) + "bit_weight";
  const char* op = op_name.c_str();
  ETM_REQUIRE(bits >= 1 && bits <= 7, op, ": bit width must be 1 to 7, got ", bits);
  const char* type_name = check_activation(op, a);
  const int64_t K = a.sizes[1];
  ETM_REQUIRE(K % 8 == 0, op, ": K (A.size(1)) must be a multiple of 8, got ", K);
  ETM_REQUIRE(is_supported_group_size(group_size), op, ": ",
              "group_size must be 32, 64, 128 or 256, got ", group_size);
  require_device_tensor(op, "B", b, 2);
  ETM_REQUIRE(b.dtype == static_cast<int32_t>(DType::uint8), op, ": B must be uint8, got ",
              dtype_name(b.dtype));
  const int64_t N = b.sizes[0];
  ETM_REQUIRE(N <= kMaxInt32Extent, op, ": B has too many rows: ", N);
  ETM_REQUIRE(b.sizes[1] == bits * K / 8, op, ": B must have ", bits, " * K / 8 = ", bits * K / 8,
              " bytes per row for K = ", K, ", got ", b.sizes[1]);
  require_unit_inner_stride(op, "B", b);
  const int64_t groups = ceil_div(K, group_size);
  using Named = std::pair<const char*, const Tensor*>;
  for (const auto& [what, t] : {Named{"S", &scales}, Named{"Z", &zeros}}) {
    require_device_tensor(op, what, *t, 2);
    require_same_dtype(op, what, *t, a);
    ETM_REQUIRE(t->sizes[0] == N && t->sizes[1] == groups, op, ": ", what, " must have shape [", N, ", ",
                groups, "] (N, ceil(K / group_size)), got [", t->sizes[0], ", ", t->sizes[1], "]");
  }
  QuantizedMatmulParams params = activation_params(a, N, group_size);
  params.w_stride_n = b.strides[0];
  params.scale_stride_n = scales.strides[0];
  params.scale_stride_g = scales.strides[1];
  params.zero_offset = 0;
  params.zero_stride_n = zeros.strides[0];
  params.zero_stride_g = zeros.strides[1];
  return encode(std::to_string(bits) + "bit", type_name, a, b, scales, zeros, params);
}

std::unique_ptr<Tensor> weight_int4pack_mm(const Tensor& a, const Tensor& b, int64_t group_size,
                                           const Tensor& scales_and_zeros) {
  constexpr const char* op = "_weight_int4pack_mm";
  const char* type_name = check_activation(op, a);
  const int64_t K = a.sizes[1];
  ETM_REQUIRE(is_supported_group_size(group_size), op, ": ",
              "qGroupSize must be 32, 64, 128 or 256, got ", group_size);
  require_device_tensor(op, "mat2", b, 4);
  ETM_REQUIRE(b.dtype == static_cast<int32_t>(DType::int32), op, ": mat2 must be int32, got ",
              dtype_name(b.dtype));
  ETM_REQUIRE(b.is_contiguous(), op, ": mat2 must be contiguous");
  const int64_t N = b.sizes[0] * 8;
  ETM_REQUIRE(N <= kMaxInt32Extent, op, ": mat2 has too many rows: ", N);
  ETM_REQUIRE(K % 8 == 0, op, ": K (self.size(1)) must be a multiple of 8, got ", K);
  ETM_REQUIRE(b.numel() * 8 == N * K, op, ": mat2 holds ", b.numel() * 8,
              " 4-bit values, expected N * K = ", N, " * ", K);
  const Tensor& sz = scales_and_zeros;
  require_device_tensor(op, "qScaleAndZeros", sz, 3);
  require_same_dtype(op, "qScaleAndZeros", sz, a);
  const int64_t groups = ceil_div(K, group_size);
  ETM_REQUIRE(sz.sizes[0] == groups && sz.sizes[1] == N && sz.sizes[2] == 2, op, ": ",
              "qScaleAndZeros must have shape [", groups, ", ", N, ", 2], got [", sz.sizes[0], ", ",
              sz.sizes[1], ", ", sz.sizes[2], "]");
  QuantizedMatmulParams params = activation_params(a, N, group_size);
  params.w_stride_n = K / 2;
  params.scale_stride_n = sz.strides[1];
  params.scale_stride_g = sz.strides[0];
  params.zero_offset = sz.strides[2];
  params.zero_stride_n = sz.strides[1];
  params.zero_stride_g = sz.strides[0];
  return encode("int4pack", type_name, a, b, sz, sz, params);
}

std::unique_ptr<Tensor> weight_int8pack_mm(const Tensor& a, const Tensor& b, const Tensor& scales) {
  constexpr const char* op = "_weight_int8pack_mm";
  const char* type_name = check_activation(op, a);
  const int64_t K = a.sizes[1];
  require_device_tensor(op, "mat2", b, 2);
  ETM_REQUIRE(b.dtype == static_cast<int32_t>(DType::int8), op, ": mat2 must be int8, got ",
              dtype_name(b.dtype));
  const int64_t N = b.sizes[0];
  ETM_REQUIRE(N <= kMaxInt32Extent, op, ": mat2 has too many rows: ", N);
  ETM_REQUIRE(b.sizes[1] == K, op, ": mat2 must have K = ", K, " columns, got ", b.sizes[1]);
  require_unit_inner_stride(op, "mat2", b);
  require_device_tensor(op, "scales", scales, 1);
  require_same_dtype(op, "scales", scales, a);
  ETM_REQUIRE(scales.sizes[0] == N, op, ": scales must have N = ", N, " elements, got ", scales.sizes[0]);
  QuantizedMatmulParams params = activation_params(a, N, kMaxInt32Extent);  // one scale per row
  params.w_stride_n = b.strides[0];
  params.scale_stride_n = scales.strides[0];
  return encode("int8", type_name, a, b, scales, scales, params);
}

}  // namespace etm::ops
