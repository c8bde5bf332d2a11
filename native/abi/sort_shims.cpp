// aoti_torch_mps_{topk,sort,sort_stable,kthvalue,median,nanmedian} (etmetal/fallback_reductions.h).
#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/sort.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

void hand_out(etm::ops::SortOutputs outputs, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  *ret0 = new_handle(std::move(outputs.values));
  *ret1 = new_handle(std::move(outputs.indices));
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                              int32_t largest, int32_t /*sorted: always sorted*/,
                                              AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    hand_out(etm::ops::topk(tensor_of(self), k, dim, largest != 0), ret0, ret1);
  });
}

extern "C" AOTITorchError aoti_torch_mps_sort(AtenTensorHandle self, int64_t dim,
                                              int32_t descending, AtenTensorHandle* ret0,
                                              AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    hand_out(etm::ops::sort(tensor_of(self), dim, descending != 0), ret0, ret1);
  });
}

extern "C" AOTITorchError aoti_torch_mps_sort_stable(AtenTensorHandle self,
                                                     int32_t* /*stable: always stable*/,
                                                     int64_t dim, int32_t descending,
                                                     AtenTensorHandle* ret0,
                                                     AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    hand_out(etm::ops::sort(tensor_of(self), dim, descending != 0), ret0, ret1);
  });
}

extern "C" AOTITorchError aoti_torch_mps_kthvalue(AtenTensorHandle self, int64_t k, int64_t dim, int32_t keepdim,
                                                  AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    hand_out(etm::ops::kthvalue(tensor_of(self), k, dim, keepdim != 0), ret0, ret1);
  });
}

extern "C" AOTITorchError aoti_torch_mps_median(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::median(tensor_of(self), false));
  });
}

extern "C" AOTITorchError aoti_torch_mps_nanmedian(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::median(tensor_of(self), true));
  });
}
