#include "ops/pointwise.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/pointwise.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr int32_t kUndefined = -1;
const auto kComplex64 = static_cast<int32_t>(DType::complex64);

const char* op_name(PointwiseOp op) {
  switch (op) {
    case PointwiseOp::add: return "add";
    case PointwiseOp::mul: return "mul";
    case PointwiseOp::pow: return "pow";
    case PointwiseOp::abs: return "abs";
    case PointwiseOp::gcd: return "gcd";
    default: return "angle";
  }
}

bool is_integral(int32_t dtype) {  // bool excluded
  switch (static_cast<DType>(dtype)) {
    case DType::uint8: case DType::int8: case DType::int16: case DType::int32: case DType::int64: return true;
    default: return false;
  }
}

bool is_supported(int32_t dtype) {
  return is_integral(dtype) || is_floating(dtype) || dtype == static_cast<int32_t>(DType::bool_) ||
         dtype == kComplex64;
}

// torch's promoteTypes over the supported dtypes.
int32_t promote(int32_t a, int32_t b) {
  if (a == kUndefined) return b;
  if (b == kUndefined || a == b) return a;
  if (a == kComplex64 || b == kComplex64) return kComplex64;
  const auto bool_code = static_cast<int32_t>(DType::bool_);
  if (a == bool_code) return b;
  if (b == bool_code) return a;
  if (is_floating(a) && is_floating(b)) {
    return a == static_cast<int32_t>(DType::float32) || b == static_cast<int32_t>(DType::float32) ||
                   a != b
               ? static_cast<int32_t>(DType::float32)
               : a;
  }
  if (is_floating(a)) return a;
  if (is_floating(b)) return b;
  const auto uint8 = static_cast<int32_t>(DType::uint8), int8 = static_cast<int32_t>(DType::int8);
  if ((a == uint8 && b == int8) || (a == int8 && b == uint8)) return static_cast<int32_t>(DType::int16);
  if (a == uint8) return b;
  if (b == uint8) return a;
  return element_size(a) >= element_size(b) ? a : b;
}

// c10's combine_categories: a lower-priority class of operands (0-dim tensors, then scalars)
// changes the result only by raising its category.
int32_t combine_categories(int32_t higher, int32_t lower) {
  if (higher == kUndefined) return lower;
  if (higher == kComplex64) return higher;
  if (lower == kComplex64) return kComplex64;
  if (is_floating(higher)) return higher;
  if (higher == static_cast<int32_t>(DType::bool_) || (lower != kUndefined && is_floating(lower))) {
    return promote(higher, lower);
  }
  return higher;
}

bool is_integral_value(double value) { return std::isfinite(value) && std::floor(value) == value; }

// The dtype torch gives a scalar operand: int64 for an integral value, float32 otherwise.
int32_t scalar_dtype(double value) {
  return static_cast<int32_t>(is_integral_value(value) ? DType::int64 : DType::float32);
}

// torch.result_type of the operands (b ignored when `unary`).
int32_t result_type(const PointwiseOperand& a, const PointwiseOperand& b, bool unary) {
  int32_t dimensioned = kUndefined, zero_dim = kUndefined, wrapped = kUndefined;
  for (const PointwiseOperand* operand : {&a, &b}) {
    if (unary && operand == &b) break;
    if (!operand->tensor) {
      wrapped = promote(wrapped, scalar_dtype(operand->scalar));
    } else if (operand->tensor->dim() == 0) {
      zero_dim = promote(zero_dim, operand->tensor->dtype);
    } else {
      dimensioned = promote(dimensioned, operand->tensor->dtype);
    }
  }
  return combine_categories(dimensioned, combine_categories(zero_dim, wrapped));
}

void require_operand(const char* op, const PointwiseOperand& operand) {
  if (!operand.tensor) return;
  require_mps(op, "operand", *operand.tensor);
  ETM_REQUIRE(is_supported(operand.tensor->dtype), op, ": dtype ", dtype_name(operand.tensor->dtype),
              " is not supported (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, complex64)");
  ETM_REQUIRE(operand.tensor->dim() <= kPointwiseMaxDims, op, ": at most ", kPointwiseMaxDims, " dimensions are supported, got ",
              operand.tensor->dim());
}

// The broadcast shape of the tensor operands.
std::vector<int64_t> broadcast_shape(const char* op, const PointwiseOperand& a, const PointwiseOperand& b) {
  std::vector<int64_t> shape;
  for (const PointwiseOperand* operand : {&a, &b}) {
    if (!operand->tensor) continue;
    const std::vector<int64_t>& sizes = operand->tensor->sizes;
    if (sizes.size() > shape.size()) shape.insert(shape.begin(), sizes.size() - shape.size(), 1);
    const size_t lead = shape.size() - sizes.size();
    for (size_t d = 0; d < sizes.size(); ++d) {
      int64_t& size = shape[lead + d];
      ETM_REQUIRE(sizes[d] == size || sizes[d] == 1 || size == 1, op, ": The size of tensor a (",
                  a.tensor ? shape_text(a.tensor->sizes) : "scalar", ") must match the size of tensor b (",
                  b.tensor ? shape_text(b.tensor->sizes) : "scalar", ") at non-singleton dimensions");
      if (size == 1) size = sizes[d];
    }
  }
  return shape;
}

// Strides reading `t` broadcast to `shape` (trailing dimensions aligned).
void broadcast_strides(const Tensor& t, const std::vector<int64_t>& shape, int64_t* into) {
  const size_t lead = shape.size() - t.sizes.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    into[d] = d < lead || t.sizes[d - lead] == 1 ? 0 : t.strides[d - lead];
  }
}

}  // namespace

std::unique_ptr<Tensor> pointwise(PointwiseOp op, const PointwiseOperand& a, const PointwiseOperand& b,
                                  double alpha) {
  const char* name = op_name(op);
  const bool unary = op == PointwiseOp::abs || op == PointwiseOp::angle;
  require_operand(name, a);
  if (!unary) require_operand(name, b);
  int32_t out_dtype = result_type(a, b, unary);
  const auto bool_code = static_cast<int32_t>(DType::bool_);
  const bool complex_math = out_dtype == kComplex64;
  const bool integral_result = !is_floating(out_dtype) && !complex_math;
  switch (op) {
    case PointwiseOp::add:
      ETM_REQUIRE(!integral_result || is_integral_value(alpha), name,
                  ": For integral input tensors, argument alpha must not be a floating point number.");
      break;
    case PointwiseOp::pow:
      ETM_REQUIRE(out_dtype != bool_code, name, ": \"pow\" not implemented for 'Bool'");
      ETM_REQUIRE(!complex_math, name, ": complex powers are not implemented");
      ETM_REQUIRE(!integral_result || b.tensor || b.scalar >= 0, name,
                  ": Integers to negative integer powers are not allowed.");
      break;
    case PointwiseOp::abs:
      ETM_REQUIRE(out_dtype != bool_code, name, ": \"abs\" not implemented for 'Bool'");
      if (complex_math) out_dtype = static_cast<int32_t>(DType::float32);  // |z| is real
      break;
    case PointwiseOp::gcd:
      ETM_REQUIRE(is_integral(out_dtype), name, ": \"gcd\" not implemented for '", dtype_name(out_dtype), "'");
      break;
    case PointwiseOp::angle:
      if (integral_result || complex_math) out_dtype = static_cast<int32_t>(DType::float32);
      break;
    case PointwiseOp::mul:
      break;
  }
  const PointwiseOperand& second = unary ? a : b;
  const std::vector<int64_t> shape = broadcast_shape(name, a, second);
  ETM_REQUIRE(shape.size() <= static_cast<size_t>(kPointwiseMaxDims), name, ": at most ", kPointwiseMaxDims, " dimensions are supported");
  std::vector<int64_t> a_strides(shape.size()), b_strides(shape.size());
  if (a.tensor) broadcast_strides(*a.tensor, shape, a_strides.data());
  if (second.tensor) broadcast_strides(*second.tensor, shape, b_strides.data());
  const std::vector<int64_t> out_strides = pointwise_output_strides(shape, {a_strides.data(), b_strides.data()});
  auto out = Runtime::get().empty_tensor(shape, out_strides, out_dtype);
  const int64_t count = out->numel();
  if (count == 0) return out;
  checked_u32(name, count, "number of elements");
  PointwiseParams p{};
  p.dims = static_cast<uint32_t>(shape.size());
  // The kernel walks the dimensions in the output's memory order and writes element `index`.
  const std::vector<size_t> order = dims_by_decreasing_stride(out_strides);
  for (size_t d = 0; d < shape.size(); ++d) {
    p.sizes[d] = checked_u32(name, shape[order[d]], "size");
    p.a_strides[d] = a_strides[order[d]];
    p.b_strides[d] = b_strides[order[d]];
  }
  const PointwiseOperand* scalar = !a.tensor ? &a : !second.tensor ? &second : nullptr;
  p.a_is_scalar = a.tensor ? 0 : 1;
  // A unary op's second operand is its first: marked scalar, so the kernel loads each element once.
  p.b_is_scalar = unary || !second.tensor ? 1 : 0;
  p.a_dtype = a.tensor ? static_cast<uint32_t>(a.tensor->dtype) : 0;
  p.b_dtype = second.tensor ? static_cast<uint32_t>(second.tensor->dtype) : 0;
  if (scalar) {
    p.scalar_float = static_cast<float>(scalar->scalar);
    p.scalar_integer = is_integral_value(scalar->scalar) ? static_cast<int64_t>(scalar->scalar) : 0;
  }
  p.op = static_cast<uint32_t>(op);
  p.out_dtype = static_cast<uint32_t>(out_dtype);
  p.math = complex_math ? kComplexMath : integral_result && op != PointwiseOp::angle ? kIntegerMath : kFloatMath;
  p.alpha_float = static_cast<float>(alpha);
  // A bool result adds alpha as a bool, as torch does.
  p.alpha_integer = out_dtype == bool_code ? (alpha != 0 ? 1 : 0) : static_cast<int64_t>(integral_result ? alpha : 0);
  // A tensor operand binds its buffer; a scalar one binds the other operand's (never read).
  const Tensor& first_bound = a.tensor ? *a.tensor : *second.tensor;
  const Tensor& second_bound = second.tensor ? *second.tensor : *a.tensor;
  KernelLaunch launch(shader_kernel("pointwise.metal", "pointwise"));
  launch.tensor(0, first_bound).tensor(1, second_bound).tensor(2, *out).value(3, p);
  const device::Size3 grid{static_cast<uint64_t>(count), 1, 1};
  launch.threads(grid, default_group(grid, launch));
  return out;
}

}  // namespace etm::ops
