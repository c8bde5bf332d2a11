/* Shape and layout fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same names
 * and signatures, ATen semantics.
 *
 * Inputs are tensors on device mps with any strides and storage offsets. cat, pad and reshape
 * (when no view fits) store a new handle to a freshly allocated, contiguous result, computed on
 * the device and encoded on the calling thread's stream (the call returns before the work has
 * run); the other functions return views: new handles over self's storage. The caller deletes
 * every handle. A failure returns 1, sets etmetal_last_error(), poisons the calling thread's
 * stream (cat, pad, reshape) and leaves *ret0 untouched. `dim` may be negative (counted from the
 * end); cat, pad and reshape handle at most 9 dims and elements of 1, 2, 4 or 8 bytes. */
#ifndef ETMETAL_FALLBACK_SHAPE_H
#define ETMETAL_FALLBACK_SHAPE_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* torch.cat: the tensors_len_ tensors (one dtype) joined along dim. 1-D tensors of size 0 are
 * skipped; the others must match in every size but dim's. */
ETMETAL_API AOTITorchError aoti_torch_mps_cat(const AtenTensorHandle* tensors, int64_t tensors_len_,
                                              int64_t dim, AtenTensorHandle* ret0);

/* torch.nn.functional.pad: pad holds (before, after) pairs from the last dim backwards; mode
 * "constant" (fill *value, 0 when value is null; negative pads crop), "reflect", "replicate" or
 * "circular" (non-negative pads on the last 1-3 dims of a 2-D to 5-D tensor). */
ETMETAL_API AOTITorchError aoti_torch_mps_pad(AtenTensorHandle self, const int64_t* pad, int64_t pad_len_,
                                              const char* mode, double* value, AtenTensorHandle* ret0);

/* torch.reshape: a view when self's strides allow one, else a contiguous copy; one size may be
 * -1. */
ETMETAL_API AOTITorchError aoti_torch_mps_reshape(AtenTensorHandle self, const int64_t* shape,
                                                  int64_t shape_len_, AtenTensorHandle* ret0);

/* Tensor.fill_: every element of self (any strides) becomes value in self's dtype. Encoded on
 * the stream, like cat. */
ETMETAL_API AOTITorchError aoti_torch_mps_fill__Scalar(AtenTensorHandle self, double value);

/* A new zero-filled contiguous tensor (torch's _efficientzerotensor; here a real tensor of
 * zeros): dtype null means float32; layout null or strided, device null or mps, pin_memory
 * null or 0. */
ETMETAL_API AOTITorchError aoti_torch_mps__efficientzerotensor(const int64_t* size, int64_t size_len_, int32_t* dtype,
                                                               int32_t* layout, int32_t* device, int32_t device_index_,
                                                               int32_t* pin_memory, AtenTensorHandle* ret0);

/* Views: torch.permute, narrow, tensor[start:end:step] along dim (a null start or end: the
 * whole range), squeeze(dim), view(dtype). */
ETMETAL_API AOTITorchError aoti_torch_mps_permute(AtenTensorHandle self, const int64_t* dims,
                                                  int64_t dims_len_, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_narrow(AtenTensorHandle self, int64_t dim, int64_t start,
                                                 int64_t length, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_slice_Tensor(AtenTensorHandle self, int64_t dim, int64_t* start,
                                                       int64_t* end, int64_t step, AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_squeeze_dim(AtenTensorHandle self, int64_t dim,
                                                      AtenTensorHandle* ret0);
ETMETAL_API AOTITorchError aoti_torch_mps_view_dtype(AtenTensorHandle self, int32_t dtype,
                                                     AtenTensorHandle* ret0);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_SHAPE_H */
