/* Pointwise fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names and
 * signatures, ATen semantics: torch's type promotion (0-dim tensors and scalars raise only the
 * category) and broadcasting. Tensors are bool, uint8, int8, int16, int32, int64, float16,
 * bfloat16, float32 or complex64 on device mps, any strides, at most 8 dimensions; *ret0
 * receives a new dense result laid out in the operands' stride order, as torch's TensorIterator
 * does (a transposed input gives a transposed result). Floating results compute in float32,
 * integer results in 64-bit integers (wrapping as torch's kernels do). Scalars arrive as doubles: an integral value counts as an
 * integer scalar, any other as a float scalar (so an integer tensor plus 2.0 stays integer,
 * where torch, told the scalar was a float, would give float32). A complex64 operand makes
 * add and mul complex64 (a float16 / bfloat16 tensor with a complex 0-dim one too, where torch
 * gives complex32) and abs and angle float32; complex pow is not implemented.
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_POINTWISE_H
#define ETMETAL_FALLBACK_POINTWISE_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* |self|; bool is refused (as torch does). */
ETMETAL_API AOTITorchError aoti_torch_mps_abs(AtenTensorHandle self, AtenTensorHandle* ret0);
/* self + alpha * other; alpha must be integral for integer results. */
ETMETAL_API AOTITorchError aoti_torch_mps_add_Scalar(AtenTensorHandle self, double other, double alpha,
                                                     AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_add_Tensor(AtenTensorHandle self, AtenTensorHandle other, double alpha,
                                                     AtenTensorHandle* ret0);
/* The angle of a real number: pi below 0, else 0 (NaN stays NaN); integer input gives float32.
 * Of a complex number: atan2(imaginary, real), float32. */
ETMETAL_API AOTITorchError aoti_torch_mps_angle(AtenTensorHandle self, AtenTensorHandle* ret0);
/* The non-negative greatest common divisor of integer tensors. */
ETMETAL_API AOTITorchError aoti_torch_mps_gcd(AtenTensorHandle self, AtenTensorHandle other, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_mul_Scalar(AtenTensorHandle self, double other, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_mul_Tensor(AtenTensorHandle self, AtenTensorHandle other,
                                                     AtenTensorHandle* ret0);
/* Powers: a negative base to an integral float power is real, as in C; integer results raise by
 * squaring (a negative integer exponent tensor gives 1, +-1 or 0 as torch does; a negative
 * integer scalar exponent is refused). Bool results are refused. */
ETMETAL_API AOTITorchError aoti_torch_mps_pow_Scalar(double self, AtenTensorHandle exponent, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_pow_Tensor_Scalar(AtenTensorHandle self, double exponent,
                                                            AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_pow_Tensor_Tensor(AtenTensorHandle self, AtenTensorHandle exponent,
                                                            AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_POINTWISE_H */
