// aoti_torch_mps_index_Tensor, _index_put, _scatter_*_out, _index_reduce, _embedding_bag(_forward_only) and
// shim.h's aoti_torch_index_put_out, _scatter_out, _scatter_reduce_out (etmetal/fallback_indexing.h).
#include <vector>

#include "abi/guard.h"
#include "etmetal/fallback_indexing.h"
#include "ops/embedding_bag.h"
#include "ops/indexing.h"
#include "ops/scatter.h"
#include "runtime/runtime.h"

using namespace etm;
using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

// c_shim_mps passes optional tensors as pointers to handles, shim.h as handles; null is None.
std::vector<const Tensor*> index_list(const AtenTensorHandle* const* indices, int64_t count) {
  ETM_REQUIRE(count >= 0, "indices_len_ is negative (", count, ")");
  ETM_REQUIRE(count == 0 || indices, "indices is null");
  std::vector<const Tensor*> list;
  for (int64_t i = 0; i < count; ++i) {
    list.push_back(indices[i] && *indices[i] ? &tensor_of(*indices[i]) : nullptr);
  }
  return list;
}

std::vector<const Tensor*> index_list(const AtenTensorHandle* indices, uint32_t count) {
  ETM_REQUIRE(count == 0 || indices, "indices is null");
  std::vector<const Tensor*> list;
  for (uint32_t i = 0; i < count; ++i) list.push_back(indices[i] ? &tensor_of(indices[i]) : nullptr);
  return list;
}

// scale_grad_by_freq and sparse shape only the gradient: a forward pass ignores them.
AOTITorchError embedding_bag(const char* function, AtenTensorHandle weight, AtenTensorHandle indices,
                             AtenTensorHandle offsets, int64_t mode, AtenTensorHandle* per_sample_weights,
                             int32_t include_last_offset, int64_t padding_idx, AtenTensorHandle* ret0,
                             AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  return guarded_encoding(function, [&] {
    for (AtenTensorHandle* ret : {ret0, ret1, ret2, ret3}) require_out(ret, "a ret pointer");
    const Tensor* sample_weights =
        per_sample_weights && *per_sample_weights ? &tensor_of(*per_sample_weights) : nullptr;
    ops::EmbeddingBagOutputs outputs =
        ops::embedding_bag(tensor_of(weight), tensor_of(indices), tensor_of(offsets), mode, sample_weights,
                           include_last_offset != 0, padding_idx);
    *ret0 = new_handle(std::move(outputs.output));
    *ret1 = new_handle(std::move(outputs.offset2bag));
    *ret2 = new_handle(std::move(outputs.bag_size));
    *ret3 = new_handle(std::move(outputs.max_indices));
  });
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_index_Tensor(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                      int64_t indices_len_, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(ops::index(tensor_of(self), index_list(indices, indices_len_)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_index_put(AtenTensorHandle self, const AtenTensorHandle** indices,
                                                   int64_t indices_len_, AtenTensorHandle values,
                                                   int32_t accumulate, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    const Tensor& source = tensor_of(self);
    const std::vector<const Tensor*> list = index_list(indices, indices_len_);
    const Tensor& value_tensor = tensor_of(values);
    Runtime& runtime = Runtime::get();
    auto out = runtime.empty_tensor(source.sizes, contiguous_strides(source.sizes), source.dtype);
    runtime.copy_tensor(*out, source);
    ops::index_put_(*out, list, value_tensor, accumulate != 0);
    *ret0 = new_handle(std::move(out));
  });
}

extern "C" AOTITorchError aoti_torch_index_put_out(AtenTensorHandle out, AtenTensorHandle self,
                                                   const AtenTensorHandle* indices, const uint32_t num_indices,
                                                   const AtenTensorHandle values, bool accumulate) {
  return guarded_encoding(__func__, [&] {
    const Tensor& target = tensor_of(out);
    const Tensor& source = tensor_of(self);
    const std::vector<const Tensor*> list = index_list(indices, num_indices);
    const Tensor& value_tensor = tensor_of(values);
    ETM_REQUIRE(target.dtype == source.dtype && target.sizes == source.sizes,
                "out must have self's dtype and shape");
    if (&target != &source) Runtime::get().copy_tensor(target, source);
    ops::index_put_(target, list, value_tensor, accumulate);
  });
}

extern "C" AOTITorchError aoti_torch_scatter_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                 AtenTensorHandle index, AtenTensorHandle src) {
  return guarded_encoding(__func__, [&] {
    ops::scatter_into(tensor_of(out), tensor_of(self), dim, tensor_of(index), tensor_of(src),
                      ops::ScatterReduction::assign, true);
  });
}

extern "C" AOTITorchError aoti_torch_mps_scatter_src_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                         AtenTensorHandle index, AtenTensorHandle src) {
  return guarded_encoding(__func__, [&] {
    ops::scatter_into(tensor_of(out), tensor_of(self), dim, tensor_of(index), tensor_of(src),
                      ops::ScatterReduction::assign, true);
  });
}

extern "C" AOTITorchError aoti_torch_mps_scatter_value_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                           AtenTensorHandle index, double value) {
  return guarded_encoding(__func__, [&] {
    ops::scatter_value_into(tensor_of(out), tensor_of(self), dim, tensor_of(index), value);
  });
}

extern "C" AOTITorchError aoti_torch_scatter_reduce_out(AtenTensorHandle out, AtenTensorHandle self, int64_t dim,
                                                        AtenTensorHandle index, AtenTensorHandle src,
                                                        const char* reduce, int32_t include_self) {
  return guarded_encoding(__func__, [&] {
    ops::scatter_into(tensor_of(out), tensor_of(self), dim, tensor_of(index), tensor_of(src),
                      ops::scatter_reduction("scatter_reduce", reduce), include_self != 0);
  });
}

extern "C" AOTITorchError aoti_torch_mps_scatter_reduce_two_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                int64_t dim, AtenTensorHandle index,
                                                                AtenTensorHandle src, const char* reduce,
                                                                int32_t include_self) {
  return guarded_encoding(__func__, [&] {
    ops::scatter_into(tensor_of(out), tensor_of(self), dim, tensor_of(index), tensor_of(src),
                      ops::scatter_reduction("scatter_reduce", reduce), include_self != 0);
  });
}

extern "C" AOTITorchError aoti_torch_mps__embedding_bag(AtenTensorHandle weight, AtenTensorHandle indices,
                                                       AtenTensorHandle offsets, int32_t scale_grad_by_freq,
                                                       int64_t mode, int32_t sparse,
                                                       AtenTensorHandle* per_sample_weights,
                                                       int32_t include_last_offset, int64_t padding_idx,
                                                       AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                                                       AtenTensorHandle* ret2, AtenTensorHandle* ret3) {
  (void)scale_grad_by_freq;
  (void)sparse;
  return embedding_bag(__func__, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                       padding_idx, ret0, ret1, ret2, ret3);
}

extern "C" AOTITorchError aoti_torch_mps__embedding_bag_forward_only(
    AtenTensorHandle weight, AtenTensorHandle indices, AtenTensorHandle offsets, int32_t scale_grad_by_freq,
    int64_t mode, int32_t sparse, AtenTensorHandle* per_sample_weights, int32_t include_last_offset,
    int64_t padding_idx, AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2,
    AtenTensorHandle* ret3) {
  (void)scale_grad_by_freq;
  (void)sparse;
  return embedding_bag(__func__, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                       padding_idx, ret0, ret1, ret2, ret3);
}

extern "C" AOTITorchError aoti_torch_mps_index_reduce(AtenTensorHandle self, int64_t dim, AtenTensorHandle index,
                                                     AtenTensorHandle source, const char* reduce, int32_t include_self,
                                                     AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(ops::index_reduce(tensor_of(self), dim, tensor_of(index), tensor_of(source),
                                         ops::scatter_reduction("index_reduce", reduce), include_self != 0));
  });
}
