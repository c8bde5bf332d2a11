/* 3-D pooling and max unpooling fallbacks of AOTInductor's Metal shim (torch 2.13
 * c_shim_mps.h), same names and signatures, ATen semantics (at::max_pool3d_with_indices,
 * at::avg_pool3d, at::max_unpool2d, at::max_unpool3d).
 *
 * The work is encoded on the calling thread's stream and runs in stream order: the call
 * returns before it has run, and inputs must stay alive until the stream has finished. A
 * failure returns 1, sets etmetal_last_error() and poisons the calling thread's stream. */
#ifndef ETMETAL_FALLBACK_POOLING3D_H
#define ETMETAL_FALLBACK_POOLING3D_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* 3-D max pooling of self [N, C, D, H, W] or [C, D, H, W] (float32, float16, bfloat16, int64,
 * int32, int16, int8 or uint8; any strides): *ret0 the maxima (self's dtype), *ret1 their int64
 * flat positions d * H * W + h * W + w in the input plane, both contiguous. kernel_size, padding
 * and dilation hold one value or three (D, H, W); stride too, or none (stride_len_ 0) for
 * kernel_size. padding is at most half the kernel; ceil_mode != 0 rounds the output size up as
 * torch does. NaN propagates. */
ETMETAL_API AOTITorchError aoti_torch_mps_max_pool3d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* 3-D average pooling of a floating self (float32, float16, bfloat16) as
 * max_pool3d_with_indices takes it (no dilation): each output is the window's sum over
 * *divisor_override (when given; not 0), else over the window's size clipped to the padded input
 * (count_include_pad != 0) or to the input. Sums accumulate in float32. */
ETMETAL_API AOTITorchError aoti_torch_mps_avg_pool3d(AtenTensorHandle self, const int64_t* kernel_size,
                                                     int64_t kernel_size_len_, const int64_t* stride,
                                                     int64_t stride_len_, const int64_t* padding,
                                                     int64_t padding_len_, int32_t ceil_mode,
                                                     int32_t count_include_pad, int64_t* divisor_override,
                                                     AtenTensorHandle* ret0);

/* Max unpooling: *ret0 is a new contiguous zero tensor [N, C, *output_size] ([C, *output_size]
 * for an unbatched self) where each element of self lands at the flat position its index names
 * in its plane. self [N, C, H, W] / [C, H, W] (2-D) or [N, C, D, H, W] / [C, D, H, W] (3-D),
 * float32, float16, bfloat16, int64, int32, int16, int8 or uint8, any strides; indices int64 of
 * self's shape. max_unpool3d's stride and padding (three values each, strides positive) are
 * checked as torch does and otherwise unused. An index outside the output plane is reported at
 * the next synchronize; elements sharing an index leave one of their values. */
ETMETAL_API AOTITorchError aoti_torch_mps_max_unpool2d(AtenTensorHandle self, AtenTensorHandle indices,
                                                       const int64_t* output_size, int64_t output_size_len_,
                                                       AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_max_unpool3d(AtenTensorHandle self, AtenTensorHandle indices,
                                                       const int64_t* output_size, int64_t output_size_len_,
                                                       const int64_t* stride, int64_t stride_len_,
                                                       const int64_t* padding, int64_t padding_len_,
                                                       AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_POOLING3D_H */
