// Pointwise fallbacks of c_shim_mps.h (shaders/pointwise.metal): add, mul, pow, abs, gcd and
// angle with ATen semantics, torch's type promotion and broadcasting.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

enum class PointwiseOp : uint32_t { add = 0, mul = 1, pow = 2, abs = 3, gcd = 4, angle = 5 };

// One operand: a tensor (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32 or
// complex64; any strides) or a scalar. The C ABI passes scalars as doubles: an integral value counts as an
// integer scalar (torch's int), any other as a float scalar (a wrapped float, float32).
struct PointwiseOperand {
  const Tensor* tensor = nullptr;
  double scalar = 0;
};

// A new result of the broadcast shape, laid out as torch's TensorIterator lays it out (dense, in
// the operands' stride order), in torch's result dtype: add computes
// a + alpha * b; abs and angle read `a` only (angle of a real number: pi below 0, NaN kept, else
// 0, in a floating dtype). Errors as torch gives them (alpha not integral for integer results,
// gcd of floats, integer to a negative integer scalar power, bool abs / pow results). A complex64
// operand makes the result complex64 (add, mul) or float32 (abs, angle); complex pow is refused.
std::unique_ptr<Tensor> pointwise(PointwiseOp op, const PointwiseOperand& a, const PointwiseOperand& b,
                                  double alpha = 1.0);

}  // namespace etm::ops
