// Complex-number ops of c_shim_mps.h, ATen semantics: the views view_as_real / view_as_complex
// (no data moves) and polar (shaders/complex.metal).
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// self (complex32, complex64 or complex128, any strides) as its real dtype with a last
// dimension of 2 (real, imaginary): every stride and the storage offset doubled.
std::unique_ptr<Tensor> view_as_real(const Tensor& self);

// self (float16, float32 or float64) with a last dimension of size 2 and stride 1, its other
// strides and storage offset even, as complex numbers without that dimension.
std::unique_ptr<Tensor> view_as_complex(const Tensor& self);

// abs * (cos(angle) + i sin(angle)) of two float32 tensors (any strides, broadcast, at most 8
// dimensions): a new complex64 tensor laid out as torch lays out pointwise results.
std::unique_ptr<Tensor> polar(const Tensor& abs, const Tensor& angle);

}  // namespace etm::ops
