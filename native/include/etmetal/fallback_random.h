/* Random-number fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names and
 * signatures, torch's distributions and generator semantics: every call draws from the
 * process's default generator, whose seed is torch's default until etmetal_manual_seed sets it;
 * each call advances it, so the calls after a given seed repeat exactly. The values are not
 * bitwise torch's (a different bit generator: Philox4x32-10, one counter per element).
 *
 * `generator` must ask for the default generator (a null pointer or a null handle): nothing in
 * the ABI creates another. Factory options: dtype (null: float32 for rand/randn, int64 for
 * randint, self's for *_like), layout (null or strided), device (null or mps), pin_memory (null
 * or 0); results are new contiguous tensors on mps, computed on the device and encoded on the
 * calling thread's stream. Float results: float32, float16, bfloat16; randint also int64,
 * int32, int16, int8, uint8, bool. A failure returns 1, sets etmetal_last_error(), poisons the
 * calling thread's stream and leaves outputs untouched. */
#ifndef ETMETAL_FALLBACK_RANDOM_H
#define ETMETAL_FALLBACK_RANDOM_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* Seeds the default generator (and restarts its sequence); *seed gets the current seed. */
ETMETAL_API AOTITorchError etmetal_manual_seed(uint64_t seed);
ETMETAL_API AOTITorchError etmetal_initial_seed(uint64_t* seed);

/* Uniform on [0, 1). */
ETMETAL_API AOTITorchError aoti_torch_mps_rand(const int64_t* size, int64_t size_len_, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_rand_generator(const int64_t* size, int64_t size_len_, AtenGeneratorHandle* generator, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_rand_like(AtenTensorHandle self, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_rand_like_generator(AtenTensorHandle self, AtenGeneratorHandle* generator, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);

/* Standard normal. */
ETMETAL_API AOTITorchError aoti_torch_mps_randn(const int64_t* size, int64_t size_len_, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randn_generator(const int64_t* size, int64_t size_len_, AtenGeneratorHandle* generator, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randn_like(AtenTensorHandle self, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randn_like_generator(AtenTensorHandle self, AtenGeneratorHandle* generator, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);

/* Integers uniform on [low, high) (low 0 where not given); randint_low_out fills `out` (any
 * strides) and is what Inductor calls for the seeds of its generated random kernels. */
ETMETAL_API AOTITorchError aoti_torch_mps_randint(int64_t high, const int64_t* size, int64_t size_len_, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randint_generator(int64_t high, const int64_t* size, int64_t size_len_, AtenGeneratorHandle* generator, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randint_low(int64_t low, int64_t high, const int64_t* size, int64_t size_len_, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randint_low_out(AtenTensorHandle out, int64_t low, int64_t high, const int64_t* size, int64_t size_len_);
ETMETAL_API AOTITorchError aoti_torch_mps_randint_like(AtenTensorHandle self, int64_t high, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_randint_like_low_dtype(AtenTensorHandle self, int64_t low, int64_t high, int32_t* dtype, int32_t* layout, int32_t* device, int32_t device_index_, int32_t* pin_memory, int32_t* memory_format, AtenTensorHandle* ret0);

/* New tensors of self's shape and dtype: uniform on [from, to), normal(mean, std),
 * exponential(lambd). */
ETMETAL_API AOTITorchError aoti_torch_mps_uniform(AtenTensorHandle self, double from, double to, AtenGeneratorHandle* generator, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_normal_functional(AtenTensorHandle self, double mean, double std, AtenGeneratorHandle* generator, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_exponential(AtenTensorHandle self, double lambd, AtenGeneratorHandle* generator, AtenTensorHandle* ret0);

/* In place: each element of self (any strides) becomes 1 with probability p (a scalar, or the
 * matching element of a float tensor broadcasting to self's shape), else 0. */
ETMETAL_API AOTITorchError aoti_torch_mps_bernoulli__float(AtenTensorHandle self, double p, AtenGeneratorHandle* generator);
ETMETAL_API AOTITorchError aoti_torch_mps_bernoulli__Tensor(AtenTensorHandle self, AtenTensorHandle p, AtenGeneratorHandle* generator);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_RANDOM_H */
