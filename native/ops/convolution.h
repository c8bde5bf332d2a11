// Host side of the convolution fallback (shaders/convolution.metal): ATen's convolution for
// 1-D, 2-D and 3-D problems, forward or transposed, with stride, padding, dilation, groups and
// an optional bias, for float32, float16 and bfloat16 operands of any strides.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

struct ConvolutionOptions {
  std::vector<int64_t> stride;          // one value per spatial dimension, or one for all
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  bool transposed = false;
  std::vector<int64_t> output_padding;  // transposed only; zeros otherwise
  int64_t groups = 1;
};

// input [N, C_in, *spatial]; weight [C_out, C_in / groups, *kernel] (forward) or
// [C_in, C_out / groups, *kernel] (transposed); bias [C_out] or null. Returns a new
// contiguous tensor [N, C_out, *output_spatial] on device mps with input's dtype, whatever
// the input's layout (channels-last included). The result is encoded on the calling
// thread's stream; nothing waits.
std::unique_ptr<Tensor> convolution(const Tensor& input, const Tensor& weight, const Tensor* bias,
                                    const ConvolutionOptions& options);

}  // namespace etm::ops
