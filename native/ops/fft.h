// Discrete Fourier transforms as MSL kernels (shaders/fft.metal), ATen semantics: _fft_r2c,
// _fft_c2c, _fft_c2r over any set of dimensions, any lengths, any strides, float32 / complex64.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// torch's fft_norm_mode: what the result is divided by (n: the product of the signal sizes).
enum class FftNorm : int64_t { none = 0, by_root_n = 1, by_n = 2 };

// Forward transform of a float32 tensor over `dim` (unique, at most 9 dimensions in all): a new
// complex64 tensor in torch's layout (fft.cpp: fft_output_strides); with `onesided` its size
// along dim.back() is n / 2 + 1.
std::unique_ptr<Tensor> fft_r2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                bool onesided);

// Forward (or inverse) complex transform of a complex64 tensor over `dim`: a new complex64
// tensor of self's shape in torch's layout. An empty dim gives a contiguous copy of self.
std::unique_ptr<Tensor> fft_c2c(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                bool forward);

// Inverse transform of a one-sided complex64 spectrum over `dim` to a real signal: a new
// float32 tensor in torch's layout whose size along dim.back() is last_dim_size (self's size
// there must be at least last_dim_size / 2 + 1; the imaginary parts of the zero and Nyquist
// frequencies are ignored, as in torch).
std::unique_ptr<Tensor> fft_c2r(const Tensor& self, const std::vector<int64_t>& dim, int64_t normalization,
                                int64_t last_dim_size);

}  // namespace etm::ops
