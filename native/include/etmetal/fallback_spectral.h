/* Complex-number and Fourier-transform fallbacks of AOTInductor's Metal shim (torch 2.13
 * c_shim_mps.h), same names and signatures, ATen semantics (at::_fft_r2c, at::_fft_c2c,
 * at::polar, at::view_as_real, at::view_as_complex).
 *
 * etmetal tensors hold complex32, complex64 and complex128 (real part first); copies convert
 * between them and the real dtypes as torch's copy_ does. The transforms and polar compute in
 * float32 / complex64, the only complex type the kernels take (Metal has no 64-bit floats).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_SPECTRAL_H
#define ETMETAL_FALLBACK_SPECTRAL_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* Forward discrete Fourier transform of a float32 tensor over the dim_len_ dimensions in dim
 * (unique, in any order; at most 9 dimensions in all; any strides and lengths): *ret0 a new
 * complex64 tensor. normalization 0 none, 1 divide by sqrt(n), 2 divide by n (n the
 * product of the transformed sizes). onesided != 0 keeps the first n / 2 + 1 frequencies along
 * the last dimension in dim. */
ETMETAL_API AOTITorchError aoti_torch_mps__fft_r2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                   int64_t normalization, int32_t onesided, AtenTensorHandle* ret0);

/* Discrete Fourier transform of a complex64 tensor over dim (forward != 0: exp(-2 pi i k t / n),
 * else the inverse direction, unscaled unless normalization says so): *ret0 a new complex64
 * tensor of self's shape.
 *
 * The results of the three transforms are dense, laid out as torch's meta functions lay them
 * out on a host with MKL (what compiled models index them with): the untransformed dimensions
 * outermost, in decreasing order of self's strides, then the transformed ones. Without MKL torch
 * gives _fft_r2c / _fft_c2r results a contiguous layout; the two agree when the untransformed
 * dimensions lead in stride order and the transformed ones trail. */
ETMETAL_API AOTITorchError aoti_torch_mps__fft_c2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                   int64_t normalization, int32_t forward, AtenTensorHandle* ret0);

/* Inverse transform of a one-sided complex64 spectrum to a float32 signal with last_dim_size
 * points along the last dimension in dim (self needs at least last_dim_size / 2 + 1 there). Not
 * in torch 2.13's c_shim_mps.h (Inductor reaches it through this name when a model registers
 * it); same signature as c_shim_cpu.h's aoti_torch_cpu__fft_c2r. */
ETMETAL_API AOTITorchError aoti_torch_mps__fft_c2r(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                   int64_t normalization, int64_t last_dim_size,
                                                   AtenTensorHandle* ret0);

/* abs * (cos(angle) + i sin(angle)) of two float32 tensors (same dtype, broadcast, any strides,
 * at most 8 dimensions): *ret0 a new complex64 tensor, dense in the inputs' stride order (as torch). */
ETMETAL_API AOTITorchError aoti_torch_mps_polar(AtenTensorHandle abs, AtenTensorHandle angle, AtenTensorHandle* ret0);

/* Views (no data moves): a complex tensor as its real dtype with a last dimension (real,
 * imaginary); a float16 / float32 / float64 tensor with a last dimension of size 2 and stride 1
 * (other strides and the storage offset even) as complex32 / complex64 / complex128. */
ETMETAL_API AOTITorchError aoti_torch_mps_view_as_real(AtenTensorHandle self, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_view_as_complex(AtenTensorHandle self, AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_SPECTRAL_H */
