// Linear layers with quantized weights (kernels in shaders/quantized.metal):
// torchao's _linear_fp_act_{1..7}bit_weight and torch's _weight_int4pack_mm /
// _weight_int8pack_mm. Each validates its arguments (etm::Error naming the problem; the ABI
// layer prefixes the C function's name), allocates the [M, N] output in the activation dtype
// and encodes one dispatch on the calling thread's stream.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// out = a @ dequant(b)^T with torchao's packing: b uint8 [N, bits * K / 8] (each row one
// little-endian bit stream of K values), scales / zeros [N, ceil(K / group_size)] in a's dtype,
// w = scale * q + zero. a is float32, float16 or bfloat16 [M, K], K a multiple of 8,
// group_size 32, 64, 128 or 256, bits 1 to 7.
std::unique_ptr<Tensor> linear_fp_act_lowbit_weight(int bits, const Tensor& a, const Tensor& b,
                                                    int64_t group_size, const Tensor& scales,
                                                    const Tensor& zeros);

// torch's _weight_int4pack_mm on MPS: b int32 [N / 8, K / (16 * inner_k_tiles), 32,
// inner_k_tiles / 2] whose bytes are the 4-bit rows [N, K / 2] (even k in the low nibble),
// scales_and_zeros [ceil(K / group_size), N, 2] in a's dtype, w = scale * (q - 8) + zero.
std::unique_ptr<Tensor> weight_int4pack_mm(const Tensor& a, const Tensor& b,
                                           int64_t group_size, const Tensor& scales_and_zeros);

// torch's _weight_int8pack_mm: b int8 [N, K], scales [N] in a's dtype; out = (a @ b^T) * scales.
std::unique_ptr<Tensor> weight_int8pack_mm(const Tensor& a, const Tensor& b,
                                           const Tensor& scales);

}  // namespace etm::ops
