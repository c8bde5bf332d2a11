/* Sorting, scans, histogram, search and normalization fallbacks of AOTInductor's Metal shim
 * (torch 2.13 c_shim_mps.h), same names and signatures, ATen semantics.
 *
 * Inputs are tensors on device mps with any strides and storage offsets. Each function
 * stores new handles to freshly allocated, contiguous results in its ret pointers (the caller
 * deletes them); everything is computed on the device, encoded on the calling thread's
 * stream: the call returns before the work has run. A failure returns 1, sets
 * etmetal_last_error(), poisons the calling thread's stream and leaves the ret pointers
 * untouched. `dim` may be negative (counted from the end); tensors have at most 9 dims. */
#ifndef ETMETAL_FALLBACK_REDUCTIONS_H
#define ETMETAL_FALLBACK_REDUCTIONS_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* The k largest (largest != 0) or smallest elements of self along dim: *ret0 values (self's
 * dtype), *ret1 their int64 indices along dim. Results are always in sorted order (largest
 * first, or smallest first), which also satisfies sorted == 0; equal values keep their input
 * order; NaN counts as larger than every number. Dtypes: float32, float16, bfloat16, int64,
 * int32, int16, int8, uint8, bool. 0 <= k <= size of dim. */
ETMETAL_API AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                               int32_t largest, int32_t sorted,
                                               AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* The k-th smallest element of self along dim (1 <= k <= its size; NaN counts as larger than
 * every number): *ret0 values (self's dtype), *ret1 int64 indices along dim, dim kept with size
 * 1 when keepdim != 0. Dtypes as topk. */
ETMETAL_API AOTITorchError aoti_torch_mps_kthvalue(AtenTensorHandle self, int64_t k, int64_t dim,
                                                   int32_t keepdim, AtenTensorHandle* ret0,
                                                   AtenTensorHandle* ret1);

/* The lower median of all elements of self as a 0-dim *ret0: NaN when self holds one. self must
 * not be empty. Dtypes as topk. */
ETMETAL_API AOTITorchError aoti_torch_mps_median(AtenTensorHandle self, AtenTensorHandle* ret0);

/* median ignoring NaN: the lower median of the numbers, NaN when there are none. */
ETMETAL_API AOTITorchError aoti_torch_mps_nanmedian(AtenTensorHandle self, AtenTensorHandle* ret0);

/* Stable sort of self along dim, ascending or descending: *ret0 values, *ret1 int64
 * indices. NaN sorts after every number (first when descending). Dtypes as topk. */
ETMETAL_API AOTITorchError aoti_torch_mps_sort(AtenTensorHandle self, int64_t dim,
                                               int32_t descending, AtenTensorHandle* ret0,
                                               AtenTensorHandle* ret1);

/* sort with an optional stable flag; the sort is stable whatever the flag says. */
ETMETAL_API AOTITorchError aoti_torch_mps_sort_stable(AtenTensorHandle self, int32_t* stable,
                                                      int64_t dim, int32_t descending,
                                                      AtenTensorHandle* ret0,
                                                      AtenTensorHandle* ret1);

/* Cumulative sum along dim into *ret0. Result dtype: *dtype when dtype is not NULL, else
 * self's dtype for float32/float16/bfloat16 and int64 for integer and bool inputs.
 * Supported: floating inputs to float32/float16/bfloat16; integer and bool inputs to
 * int64/int32/float32. Elements are converted to the result dtype, then summed in float32
 * (floating results) or wrapping 64-bit integers. */
ETMETAL_API AOTITorchError aoti_torch_mps_cumsum(AtenTensorHandle self, int64_t dim,
                                                 int32_t* dtype, AtenTensorHandle* ret0);

/* RMS normalization over the trailing dims normalized_shape[0..normalized_shape_len_):
 * *ret0 = input / sqrt(mean(input^2) + eps) * weight (input's dtype and shape), *ret1 = the
 * float32 rstd, shaped as input's leading sizes followed by a 1 per normalized dim. input is
 * float32, float16 or bfloat16; weight (NULL, or a pointer to a handle of shape
 * normalized_shape and input's dtype) is optional; eps NULL means float32's machine epsilon
 * (1.1920929e-07) for every dtype, as ATen's CPU and MPS kernels use. Computed in float32. */
ETMETAL_API AOTITorchError aoti_torch_mps__fused_rms_norm(AtenTensorHandle input,
                                                          const int64_t* normalized_shape,
                                                          int64_t normalized_shape_len_,
                                                          AtenTensorHandle* weight, double* eps,
                                                          AtenTensorHandle* ret0,
                                                          AtenTensorHandle* ret1);

/* Histogram of self into *ret0: `bins` (> 0) equal-width bins over [min, max], or over the
 * data's own [min, max] when min == max (widened by 1 on each side when that is a point);
 * elements outside the range and NaN are not counted; v == max counts in the last bin. The
 * result is 1-D with `bins` counts in self's dtype (float32, float16 or bfloat16). Bins are
 * computed in float32. A data range that is not finite poisons the stream. */
ETMETAL_API AOTITorchError aoti_torch_mps_histc(AtenTensorHandle self, int64_t bins, double min,
                                                double max, AtenTensorHandle* ret0);

/* histogram.bin_ct: torch.histogram(self, bins, range, weight, density) over self's elements
 * (float32, any shape and strides). range: NULL, or *range holding {min, max} (range_len_ 2);
 * without it the data's [min, max] ([0, 1] for no data); a one-point range is widened by 0.5
 * each side. weight: NULL or a float32 tensor with self's number of elements. *ret0: hist
 * [bins], *ret1: bin edges [bins + 1] = linspace(min, max, bins + 1), both float32; with
 * density != 0 each bin is divided by the total and its width. Elements outside the edges and
 * NaN are not counted; the last bin includes its right edge. A data range that is not finite
 * poisons the stream. */
ETMETAL_API AOTITorchError aoti_torch_mps_histogram_bin_ct(AtenTensorHandle self, int64_t bins,
                                                          const double** range, int64_t range_len_,
                                                          AtenTensorHandle* weight, int32_t density,
                                                          AtenTensorHandle* ret0, AtenTensorHandle* ret1);

/* _histogramdd_from_bin_cts: the D-dimensional histogram of self [..., D] (float32, at least 2
 * dimensions: points of D coordinates) with bins[k] bins in coordinate k (bins_len_ == D).
 * range: NULL or *range holding {min0, max0, min1, max1, ...} (2 * D); weight: NULL or float32
 * of self's shape without its last dimension. *ret0: hist [bins...], float32; each coordinate
 * follows histogram_bin_ct's rules, and a point falling outside any coordinate's edges is not
 * counted. */
ETMETAL_API AOTITorchError aoti_torch_mps__histogramdd_from_bin_cts(AtenTensorHandle self, const int64_t* bins,
                                                                   int64_t bins_len_, const double** range,
                                                                   int64_t range_len_, AtenTensorHandle* weight,
                                                                   int32_t density, AtenTensorHandle* ret0);

/* searchsorted: for every element of self, its insertion position in sorted_sequence along
 * the last dimension (the first position whose element is >= the value, or > it when right
 * != 0 or *side is "right"; side, when not NULL, must not contradict right). sorted_sequence
 * is 1-D or has self's leading dimensions; sorter (optional) is an int64 permutation of its
 * shape (an out-of-range entry poisons the stream). *ret0: self's shape, int64 (int32 with
 * out_int32 != 0). Dtypes: float32, float16, bfloat16, int64, int32, int16, int8, uint8,
 * compared in their promoted dtype (a mixed pair is converted on the host, after a wait).
 * NaN values land past the end of their row. */
ETMETAL_API AOTITorchError aoti_torch_mps_searchsorted_Tensor(
    AtenTensorHandle sorted_sequence, AtenTensorHandle self, int32_t out_int32, int32_t right,
    const char** side, AtenTensorHandle* sorter, AtenTensorHandle* ret0);
/* searchsorted of one value in a 1-D sorted_sequence; *ret0 is 0-dim. For an integer
 * sequence the value is compared exactly (torch compares in float32). */
ETMETAL_API AOTITorchError aoti_torch_mps_searchsorted_Scalar(
    AtenTensorHandle sorted_sequence, double self, int32_t out_int32, int32_t right,
    const char** side, AtenTensorHandle* sorter, AtenTensorHandle* ret0);
/* searchsorted(boundaries, self, out_int32, right) for a 1-D boundaries tensor. */
ETMETAL_API AOTITorchError aoti_torch_mps_bucketize_Tensor(AtenTensorHandle self,
                                                           AtenTensorHandle boundaries,
                                                           int32_t out_int32, int32_t right,
                                                           AtenTensorHandle* ret0);

/* Cumulative product along dim into *ret0; result dtype and supported pairs as cumsum. In
 * order along dim, as torch's CPU kernel: float32 results as products in double rounded to
 * float (but for rare last-bit ties), float16 / bfloat16 results with float32 products,
 * integer results with 64-bit wrapping ones. */
ETMETAL_API AOTITorchError aoti_torch_mps_cumprod(AtenTensorHandle self, int64_t dim,
                                                  int32_t* dtype, AtenTensorHandle* ret0);
/* Running maximum / minimum along dim: *ret0 values (self's dtype), *ret1 the int64 index
 * where it was last reached (ties move it forward); NaN, once seen, stays. Dtypes: float32,
 * float16, bfloat16, int64, int32, int16, int8, uint8, bool. */
ETMETAL_API AOTITorchError aoti_torch_mps_cummax(AtenTensorHandle self, int64_t dim,
                                                 AtenTensorHandle* ret0, AtenTensorHandle* ret1);
ETMETAL_API AOTITorchError aoti_torch_mps_cummin(AtenTensorHandle self, int64_t dim,
                                                 AtenTensorHandle* ret0, AtenTensorHandle* ret1);
/* log(cumsum(exp(self))) along dim, without overflow, accumulated in float32; float32,
 * float16 or bfloat16. */
ETMETAL_API AOTITorchError aoti_torch_mps_logcumsumexp(AtenTensorHandle self, int64_t dim,
                                                       AtenTensorHandle* ret0);

/* int64 [count, self.dim()] coordinates of self's nonzero elements (NaN counts), row-major
 * order, any dtype above and bool. The count decides the shape: the call waits for the
 * calling thread's stream. */
ETMETAL_API AOTITorchError aoti_torch_mps_nonzero(AtenTensorHandle self, AtenTensorHandle* ret0);
/* nonzero with `size` (>= 0) rows: the first `size` coordinates, the rest fill_value. Does
 * not wait. */
ETMETAL_API AOTITorchError aoti_torch_mps_nonzero_static(AtenTensorHandle self, int64_t size,
                                                         int64_t fill_value,
                                                         AtenTensorHandle* ret0);
/* The elements of self where the bool mask is true (self and mask broadcast to one shape),
 * 1-D, row-major order, self's dtype. The count decides the length: the call waits. */
ETMETAL_API AOTITorchError aoti_torch_mps_masked_select(AtenTensorHandle self,
                                                        AtenTensorHandle mask,
                                                        AtenTensorHandle* ret0);
/* self with the elements where mask (bool) is true replaced, in row-major order, by source's
 * elements in row-major order: self and mask broadcast to one shape, the shape of the new
 * contiguous *ret0; source has self's dtype and any shape. Does not wait: a source with fewer
 * elements than the mask has true ones is reported at synchronize. Dtypes as masked_select. */
ETMETAL_API AOTITorchError aoti_torch_mps_masked_scatter(AtenTensorHandle self, AtenTensorHandle mask,
                                                         AtenTensorHandle source, AtenTensorHandle* ret0);

/* For a 1-D int64 / int32 repeats: each index i repeated repeats[i] times, in repeats' dtype.
 * Without output_size the call waits for the stream (the sum is the length) and fails for a
 * negative repeat; with it, a negative repeat or a sum other than *output_size poisons the
 * stream once the kernels have run. */
ETMETAL_API AOTITorchError aoti_torch_mps_repeat_interleave_Tensor(AtenTensorHandle repeats,
                                                                   int64_t* output_size,
                                                                   AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif
