/* Advanced indexing and scatter fallbacks of AOTInductor: the aoti_torch_mps_* ones of torch
 * 2.13's c_shim_mps.h and the aoti_torch_* ones of its shim.h, same names and signatures,
 * ATen semantics.
 *
 * Tensors are on device mps with any strides and storage offsets, at most 9 dimensions. The
 * work is encoded on the calling thread's stream: the call returns before it has run (except
 * that a bool mask index waits for the stream, its number of true elements deciding shapes).
 * A failure returns 1, sets etmetal_last_error(), poisons the calling thread's stream and
 * leaves the ret pointers untouched. An index out of range is found by the kernel: the call
 * succeeds, and the next synchronize reports "index V is out of bounds for dimension D with
 * size S". */
#ifndef ETMETAL_FALLBACK_INDEXING_H
#define ETMETAL_FALLBACK_INDEXING_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* self[indices] into a new contiguous tensor. indices[i] is NULL or points to NULL for "the
 * whole dimension i", else to an int64 / int32 index tensor (negative values count from the
 * end) or a bool / uint8 mask covering as many dimensions as it has. Index tensors broadcast
 * together; their dimensions replace the indexed ones when those are adjacent, else come
 * first. Any dtype of 1, 2, 4 or 8 bytes. */
ETMETAL_API AOTITorchError aoti_torch_mps_index_Tensor(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                       int64_t indices_len_, AtenTensorHandle* ret0);

/* A new contiguous copy of self with self[indices] = values (accumulate == 0) or
 * += values (accumulate != 0: duplicate indices add up, in index order). values has self's
 * dtype and broadcasts to the shape of self[indices]. With accumulate: float32, float16,
 * bfloat16, int64, int32, int16, int8, uint8, bool (sum is "or"). */
ETMETAL_API AOTITorchError aoti_torch_mps_index_put(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                    int64_t indices_len_, AtenTensorHandle values,
                                                    int32_t accumulate, AtenTensorHandle* ret0);

/* out = self with out[indices] = / += values, as aoti_torch_mps_index_put; indices[i] is
 * NULL for "the whole dimension i". out has self's shape and dtype and may be self. */
ETMETAL_API AOTITorchError aoti_torch_index_put_out(AtenTensorHandle out, AtenTensorHandle self,
                                                    const AtenTensorHandle* indices, const uint32_t num_indices,
                                                    const AtenTensorHandle values, bool accumulate);

/* out = self, then out[..., index[i], ...] = src[i] along dim (index int64 or int32, self's
 * number of dimensions, no larger than src anywhere and than self apart from dim). out has
 * self's shape and dtype and may be self. Dtypes: float32, float16, bfloat16, int64, int32,
 * int16, int8, uint8, bool. */
ETMETAL_API AOTITorchError aoti_torch_scatter_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                  AtenTensorHandle index, AtenTensorHandle src);
ETMETAL_API AOTITorchError aoti_torch_mps_scatter_src_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                          AtenTensorHandle index, AtenTensorHandle src);

/* scatter with every src element `value`, converted to self's dtype. */
ETMETAL_API AOTITorchError aoti_torch_mps_scatter_value_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                            AtenTensorHandle index, double value);

/* scatter combining with reduce "sum", "prod", "mean" (integers: floor division; not bool),
 * "amax" or "amin" (NaN propagates), in index order. include_self == 0: the elements index
 * reaches start from the reduction's identity, and mean counts only src values. */
ETMETAL_API AOTITorchError aoti_torch_scatter_reduce_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                         AtenTensorHandle index, AtenTensorHandle src,
                                                         const char* reduce, int32_t include_self);
ETMETAL_API AOTITorchError aoti_torch_mps_scatter_reduce_two_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                 int64_t dim, AtenTensorHandle index,
                                                                 AtenTensorHandle src, const char* reduce,
                                                                 int32_t include_self);

/* A new contiguous copy of self with self[..., index[i], ...] (reduce)= source[..., i, ...]
 * along dim: reduce "prod", "mean", "amax" or "amin" as scatter_reduce (include_self the
 * same); index 1-D, int64 or int32, source.size(dim) entries in [0, self.size(dim)); source
 * matches self apart from dim. */
ETMETAL_API AOTITorchError aoti_torch_mps_index_reduce(AtenTensorHandle self, int64_t dim, AtenTensorHandle index,
                                                       AtenTensorHandle source, const char* reduce,
                                                       int32_t include_self, AtenTensorHandle* ret0);

/* embedding_bag with a GPU backend's outputs: *ret0 [bags, features] (weight's dtype), *ret1
 * offset2bag [indices] (the bag of each index; 0 outside every bag), *ret2 bag_size
 * [offsets] (indices other than padding_idx per bag), *ret3 max_indices ([bags, features], the
 * row each maximum came from, -1 for an empty bag, with mode 2; else [0]); the index outputs
 * in indices' dtype. weight [rows, features] float32 / float16 / bfloat16; indices and offsets
 * 1-D, int64 or int32. Bag b starts at offsets[b] and ends where the next one starts, the last
 * at the end of indices, or at offsets[bags] with include_last_offset (then bags is
 * offsets' length - 1). mode 0 sums (rows scaled by *per_sample_weights when given: weight's
 * dtype, one per index), 1 averages, 2 takes the maximum (ties: the first row); an empty bag
 * gives zeros. Indices equal to padding_idx (negative: none) are skipped. scale_grad_by_freq
 * and sparse concern only the gradient and are ignored. An index outside [0, rows) is reported
 * at synchronize. */
ETMETAL_API AOTITorchError aoti_torch_mps__embedding_bag(AtenTensorHandle weight, AtenTensorHandle indices,
                                                         AtenTensorHandle offsets, int32_t scale_grad_by_freq,
                                                         int64_t mode, int32_t sparse,
                                                         AtenTensorHandle* per_sample_weights,
                                                         int32_t include_last_offset, int64_t padding_idx,
                                                         AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                                                         AtenTensorHandle* ret2, AtenTensorHandle* ret3);
ETMETAL_API AOTITorchError aoti_torch_mps__embedding_bag_forward_only(
    AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
    int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset,
    int64_t padding_idx, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2,
    AtenTensorHandle* ret3);

ETMETAL_END_DECLS

#endif
