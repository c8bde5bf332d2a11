#include "ops/factories.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/random.h"
#include "ops/shape.h"
#include "ops/shader_kernels.h"
#include "ops/sort.h"
#include "params/factories.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

std::unique_ptr<Tensor> new_vector(int64_t length, int32_t dtype) {
  return Runtime::get().empty_tensor({length}, {1}, dtype);
}

void launch_elementwise(KernelLaunch& launch, int64_t count) {
  const device::Size3 grid{static_cast<uint64_t>(count), 1, 1};
  launch.threads(grid, default_group(grid, launch));
}

// The largest n - 1 a randperm of dtype holds exactly; 0 for a dtype randperm does not support.
int64_t largest_exact_index(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::int64: return INT64_MAX;
    case DType::int32: return INT32_MAX;
    case DType::int16: return INT16_MAX;
    case DType::int8: return INT8_MAX;
    case DType::uint8: return UINT8_MAX;
    case DType::float32: return int64_t{1} << 24;
    case DType::float16: return int64_t{1} << 11;
    case DType::bfloat16: return int64_t{1} << 8;
    default: return 0;
  }
}

}  // namespace

std::unique_ptr<Tensor> hann_window(int64_t window_length, int32_t dtype) {
  constexpr const char* op = "hann_window";
  const char* type = msl_float_type_name(dtype);
  ETM_REQUIRE(type, op, ": hann_window expects floating point dtypes (float32, float16, bfloat16), got ",
              dtype_name(dtype));
  ETM_REQUIRE(window_length >= 0, op, ": requires non-negative window_length, got window_length=", window_length);
  auto out = new_vector(window_length, dtype);
  if (window_length == 0) return out;
  if (window_length == 1) {  // torch's special case
    fill(*out, 1.0);
    return out;
  }
  checked_u32(op, window_length, "window_length");
  const float period = static_cast<float>(window_length);
  KernelLaunch launch(shader_kernel("factories.metal", std::string("hann_window_") + type));
  launch.tensor(0, *out).value(1, period);
  launch_elementwise(launch, window_length);
  return out;
}

std::unique_ptr<Tensor> randperm(int64_t n, int32_t dtype) {
  constexpr const char* op = "randperm";
  const int64_t largest = largest_exact_index(dtype);
  ETM_REQUIRE(largest > 0, op, ": dtype ", dtype_name(dtype),
              " is not supported (int64, int32, int16, int8, uint8, float32, float16, bfloat16)");
  ETM_REQUIRE(n >= 0, op, ": Trying to create tensor with negative dimension ", n, ": [", n, "]");
  ETM_REQUIRE(n - 1 <= largest, op, ": n is too large for result tensor type: '", dtype_name(dtype),
              "' (n - 1 = ", n - 1, " is above ", largest, ")");
  if (n == 0) return new_vector(0, dtype);
  checked_u32(op, n, "n");
  auto keys = new_vector(n, static_cast<int32_t>(DType::int64));
  fill_random_int(*keys, 0, int64_t{1} << 62);
  std::unique_ptr<Tensor> permutation = sort(*keys, 0, false).indices;
  if (dtype == static_cast<int32_t>(DType::int64)) return permutation;
  auto out = new_vector(n, dtype);
  KernelLaunch launch(shader_kernel("factories.metal", std::string("index_cast_") + msl_element_type_name(dtype)));
  launch.tensor(0, *permutation).tensor(1, *out);
  launch_elementwise(launch, n);
  return out;
}

DropoutOutputs native_dropout(const Tensor& input, double p, bool train) {
  constexpr const char* op = "native_dropout";
  require_mps(op, "input", input);
  const char* type = msl_float_type_name(input.dtype);
  ETM_REQUIRE(type, op, ": dtype ", dtype_name(input.dtype), " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(p >= 0 && p <= 1, op, ": dropout probability has to be between 0 and 1, but got ", p);
  ETM_REQUIRE(input.dim() <= kFactoriesMaxDims, op, ": at most ", kFactoriesMaxDims, " dimensions are supported, got ", input.dim());
  Runtime& runtime = Runtime::get();
  const std::vector<int64_t> strides = contiguous_strides(input.sizes);
  DropoutOutputs result;
  result.output = runtime.empty_tensor(input.sizes, strides, input.dtype);
  result.mask = runtime.empty_tensor(input.sizes, strides, static_cast<int32_t>(DType::bool_));
  const int64_t count = input.numel();
  if (count == 0) return result;
  checked_u32(op, count, "number of elements");
  const double keep = 1.0 - p;
  if (train) {
    fill_bernoulli(*result.mask, keep, nullptr);
  } else {
    runtime.current_stream().fill_buffer(result.mask->storage->buffer, result.mask->buffer_offset(),
                                         static_cast<size_t>(count), 1);
  }
  DropoutParams params{};
  params.dims = static_cast<uint32_t>(input.dim());
  for (int64_t d = 0; d < input.dim(); ++d) {
    params.sizes[d] = checked_u32(op, input.sizes[d], "size");
    params.strides[d] = input.strides[d];
  }
  params.scale = train ? (keep == 0 ? 0.0f : static_cast<float>(1.0 / keep)) : 1.0f;
  KernelLaunch launch(shader_kernel("factories.metal", std::string("dropout_") + type));
  launch.tensor(0, input).tensor(1, *result.mask).tensor(2, *result.output).value(3, params);
  launch_elementwise(launch, count);
  return result;
}

}  // namespace etm::ops
