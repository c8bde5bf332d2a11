// hann_window, randperm and native_dropout (shaders/factories.metal, with the random and sort
// kernels), ATen semantics.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// A periodic Hann window of window_length values (torch.hann_window's default: period N, and
// [1] for N = 1), in dtype (float32, float16 or bfloat16).
std::unique_ptr<Tensor> hann_window(int64_t window_length, int32_t dtype);

// A random permutation of 0 .. n - 1 from the default generator, in dtype (int64, int32, int16,
// int8, uint8, float32, float16 or bfloat16; n - 1 must be exact in it): random keys sorted
// stably, so every permutation is equally likely up to ties of 62-bit keys.
std::unique_ptr<Tensor> randperm(int64_t n, int32_t dtype);

struct DropoutOutputs {
  std::unique_ptr<Tensor> output;  // input's dtype, contiguous
  std::unique_ptr<Tensor> mask;    // bool, contiguous: true where the element was kept
};

// native_dropout: in training, each element is kept with probability 1 - p and scaled by
// 1 / (1 - p) (0 when p is 1), the rest become 0 (NaN stays NaN); otherwise output is a copy and
// mask all true. input float32, float16 or bfloat16, any strides; 0 <= p <= 1.
DropoutOutputs native_dropout(const Tensor& input, double p, bool train);

}  // namespace etm::ops
