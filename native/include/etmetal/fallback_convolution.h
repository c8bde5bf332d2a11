/* The convolution and max-pooling fallbacks of AOTInductor's Metal shim (torch 2.13
 * c_shim_mps.h), same names and signatures, ATen semantics (at::convolution,
 * at::max_pool2d_with_indices, at::avg_pool2d, adaptive pooling).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_CONVOLUTION_H
#define ETMETAL_FALLBACK_CONVOLUTION_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* 1-D, 2-D or 3-D convolution of input [N, C_in, *spatial] (3-D, 4-D or 5-D) with weight
 * [C_out, C_in / groups, *kernel], or with transposed != 0 the transposed convolution with
 * weight [C_in, C_out / groups, *kernel], whose output grows by output_padding at the end
 * of each spatial dimension. stride, padding, dilation and output_padding hold one value per
 * spatial dimension or one for all; output_padding must be zero unless transposed. bias is
 * null (no bias) or points to a handle of a [C_out] tensor. Operands are float32, float16 or
 * bfloat16 tensors on device mps, all of one dtype, with any strides and storage offsets;
 * products accumulate in float32. *ret0 receives a new contiguous tensor (the caller deletes
 * it) of the input's dtype, whatever the input's layout: the strides AOTInductor compiles for
 * this call's result when torch is built without MPS (etmetal_py's compile path). */
ETMETAL_API AOTITorchError aoti_torch_mps_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t transposed, const int64_t* output_padding,
    int64_t output_padding_len_, int64_t groups, AtenTensorHandle* ret0);

/* 2-D max pooling of self [N, C, H, W] or [C, H, W] (float32, float16, bfloat16, any strides):
 * *ret0 the maxima (self's dtype), *ret1 their int64 flat positions h * W + w in the input
 * plane, both contiguous. kernel_size, padding and dilation hold one value or two (H, W);
 * stride too, or none (stride_len_ 0) for kernel_size. padding is at most half the kernel;
 * ceil_mode != 0 rounds the output size up as torch does. NaN propagates. */
ETMETAL_API AOTITorchError aoti_torch_mps_max_pool2d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* 2-D average pooling of self as max_pool2d_with_indices takes it (no dilation): each output is
 * the window's sum over *divisor_override (when given; not 0), else over the window's size
 * clipped to the padded input (count_include_pad != 0) or to the input. */
ETMETAL_API AOTITorchError aoti_torch_mps_avg_pool2d(AtenTensorHandle self, const int64_t* kernel_size,
                                                     int64_t kernel_size_len_, const int64_t* stride,
                                                     int64_t stride_len_, const int64_t* padding,
                                                     int64_t padding_len_, int32_t ceil_mode,
                                                     int32_t count_include_pad, int64_t* divisor_override,
                                                     AtenTensorHandle* ret0);

/* Adaptive pooling of self (as max_pool2d_with_indices takes it) to output_size (OH, OW):
 * output (oh, ow) covers rows [floor(oh * H / OH), ceil((oh + 1) * H / OH)) and columns alike.
 * _adaptive_avg_pool2d: the mean (an empty output_size gives an empty result);
 * adaptive_max_pool2d: the maximum (NaN propagates) and its int64 flat position h * W + w. */
ETMETAL_API AOTITorchError aoti_torch_mps__adaptive_avg_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                               int64_t output_size_len_, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_adaptive_max_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                              int64_t output_size_len_, AtenTensorHandle* ret0,
                                                              AtenTensorHandle* ret1);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_CONVOLUTION_H */
