/* Window, permutation and dropout fallbacks of AOTInductor's Metal shim (torch 2.13
 * c_shim_mps.h), same names and signatures, ATen semantics (at::hann_window, at::randperm,
 * at::native_dropout). The random ones draw from etmetal's default generator (see
 * fallback_random.h: torch's distributions and seed semantics, not its bits).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_FACTORIES_H
#define ETMETAL_FALLBACK_FACTORIES_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* *ret0: a new periodic Hann window [window_length], 0.5 - 0.5 cos(2 pi i / window_length)
 * ([1] for length 1), in *dtype (float32, float16, bfloat16; null: float32). layout, device,
 * device_index_ and pin_memory as torch's factory options (strided, mps, 0 or -1, unpinned). */
ETMETAL_API AOTITorchError aoti_torch_mps_hann_window(int64_t window_length, int32_t* dtype, int32_t* layout,
                                                      int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                                      AtenTensorHandle* ret0);

/* *ret0: a new random permutation of 0 .. n - 1 in *dtype (int64, int32, int16, int8, uint8,
 * float32, float16, bfloat16; null: int64), n - 1 exact in it. Options as hann_window's. */
ETMETAL_API AOTITorchError aoti_torch_mps_randperm(int64_t n, int32_t* dtype, int32_t* layout, int32_t* device,
                                                   int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);

/* Dropout of input (float32, float16, bfloat16; any strides) with probability p in [0, 1]. In
 * training (train null or *train != 0) *ret1 is a new bool mask, true with probability 1 - p,
 * and *ret0 = input * mask / (1 - p) (0 for p 1; a dropped NaN stays NaN); otherwise *ret0 is a
 * copy of input and *ret1 all true. Both contiguous, input's shape. */
ETMETAL_API AOTITorchError aoti_torch_mps_native_dropout(AtenTensorHandle input, double p, int32_t* train,
                                                         AtenTensorHandle* ret0, AtenTensorHandle* ret1);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_FACTORIES_H */
