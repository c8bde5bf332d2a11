/* In-place metadata fallbacks of AOTInductor's Metal shim (torch 2.13 c_shim_mps.h), same
 * names and signatures, ATen semantics (Tensor.resize_, resize_as_, set_). They change the
 * tensor the handle names (its sizes, strides and, for set_, storage); other handles keep
 * theirs. A failure returns 1, sets etmetal_last_error(), poisons the calling thread's stream
 * and leaves the tensor as it was. */
#ifndef ETMETAL_FALLBACK_RESIZE_H
#define ETMETAL_FALLBACK_RESIZE_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* self gets sizes `size` with contiguous strides (memory_format null or 0), or channels-last
 * ones (2 for 4-D, 3 for 5-D); its storage offset and dtype stay. When the storage is too small
 * it is replaced, for every view sharing it, by a new allocation holding its bytes (copied in
 * stream order; also for tensors over caller memory, where torch refuses); the added elements
 * are uninitialized. memory_format 1 (preserve) is refused, as torch does. */
ETMETAL_API AOTITorchError aoti_torch_mps_resize_(AtenTensorHandle self, const int64_t* size, int64_t size_len_,
                                                  int32_t* memory_format);

/* resize_ to the_template's sizes; memory_format 1 (preserve) takes the template's layout
 * (channels-last when its strides are, else contiguous). */
ETMETAL_API AOTITorchError aoti_torch_mps_resize_as_(AtenTensorHandle self, AtenTensorHandle the_template,
                                                     int32_t* memory_format);

/* self becomes a view of source's storage with source's sizes, strides and storage offset;
 * both must have one dtype. */
ETMETAL_API AOTITorchError aoti_torch_mps_set__source_Tensor(AtenTensorHandle self, AtenTensorHandle source);

ETMETAL_END_DECLS

#endif /* ETMETAL_FALLBACK_RESIZE_H */
