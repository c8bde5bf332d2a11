/* torch's weight-quantized matmul fallbacks for AOTInductor on "mps"; the names and
 * signatures of torch 2.13's generated c_shim_mps.h.
 *
 * Each allocates the [M, N] result (a new handle the caller deletes) in self's dtype and
 * encodes the work on the calling thread's stream; inputs must stay alive until that work
 * has run. Failures also poison the stream (the next etmetal_synchronize reports them). */
#ifndef ETMETAL_FALLBACK_QUANTIZED_H
#define ETMETAL_FALLBACK_QUANTIZED_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* self [M, K] float32/float16/bfloat16; mat2 int32 [N/8, K/(16*inner_k_tiles), 32,
 * inner_k_tiles/2] holding the 4-bit weights as bytes [N, K/2], even k in the low nibble
 * (what torch's _convert_weight_to_int4pack produces on MPS); qScaleAndZeros [ceil(K/qGroupSize),
 * N, 2] in self's dtype; qGroupSize 32, 64, 128 or 256; K a multiple of 8.
 * ret0 = self @ W^T with W[n, k] = scale * (q - 8) + zero. */
ETMETAL_API AOTITorchError aoti_torch_mps__weight_int4pack_mm(AtenTensorHandle self,
                                                              AtenTensorHandle mat2,
                                                              int64_t qGroupSize,
                                                              AtenTensorHandle qScaleAndZeros,
                                                              AtenTensorHandle* ret0);

/* self [M, K] float32/float16/bfloat16; mat2 int8 [N, K]; scales [N] in self's dtype.
 * ret0 = (self @ mat2^T) * scales. Any M, N, K; any strides of self. */
ETMETAL_API AOTITorchError aoti_torch_mps__weight_int8pack_mm(AtenTensorHandle self,
                                                              AtenTensorHandle mat2,
                                                              AtenTensorHandle scales,
                                                              AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif
