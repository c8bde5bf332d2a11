// The pointwise fallbacks (etmetal/fallback_pointwise.h).
#include "abi/guard.h"
#include "etmetal/fallback_pointwise.h"
#include "ops/pointwise.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;
using etm::ops::pointwise;
using etm::ops::PointwiseOp;
using etm::ops::PointwiseOperand;

namespace {

PointwiseOperand tensor_operand(AtenTensorHandle handle) { return {&tensor_of(handle), 0}; }
PointwiseOperand scalar_operand(double value) { return {nullptr, value}; }

// `compute` runs inside the guard (a bad handle throws there); its result goes to *ret0.
template <typename Compute>
AOTITorchError returning(const char* function, AtenTensorHandle* ret0, Compute compute) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(compute());
  });
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_abs(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] { return pointwise(PointwiseOp::abs, tensor_operand(self), {}); });
}

extern "C" AOTITorchError aoti_torch_mps_add_Scalar(AtenTensorHandle self, double other, double alpha,
                                                   AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::add, tensor_operand(self), scalar_operand(other), alpha);
  });
}

extern "C" AOTITorchError aoti_torch_mps_add_Tensor(AtenTensorHandle self, AtenTensorHandle other, double alpha,
                                                   AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::add, tensor_operand(self), tensor_operand(other), alpha);
  });
}

extern "C" AOTITorchError aoti_torch_mps_angle(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] { return pointwise(PointwiseOp::angle, tensor_operand(self), {}); });
}

extern "C" AOTITorchError aoti_torch_mps_gcd(AtenTensorHandle self, AtenTensorHandle other, AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::gcd, tensor_operand(self), tensor_operand(other));
  });
}

extern "C" AOTITorchError aoti_torch_mps_mul_Scalar(AtenTensorHandle self, double other, AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::mul, tensor_operand(self), scalar_operand(other));
  });
}

extern "C" AOTITorchError aoti_torch_mps_mul_Tensor(AtenTensorHandle self, AtenTensorHandle other,
                                                   AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::mul, tensor_operand(self), tensor_operand(other));
  });
}

extern "C" AOTITorchError aoti_torch_mps_pow_Scalar(double self, AtenTensorHandle exponent, AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::pow, scalar_operand(self), tensor_operand(exponent));
  });
}

extern "C" AOTITorchError aoti_torch_mps_pow_Tensor_Scalar(AtenTensorHandle self, double exponent,
                                                          AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::pow, tensor_operand(self), scalar_operand(exponent));
  });
}

extern "C" AOTITorchError aoti_torch_mps_pow_Tensor_Tensor(AtenTensorHandle self, AtenTensorHandle exponent,
                                                          AtenTensorHandle* ret0) {
  return returning(__func__, ret0, [&] {
    return pointwise(PointwiseOp::pow, tensor_operand(self), tensor_operand(exponent));
  });
}
