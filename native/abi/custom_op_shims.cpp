// etmetal's own custom ops (etmetal/custom_ops.h): aoti_torch_mps_gather_qmv and
// aoti_torch_mps_gated_delta_rule.
#include "abi/guard.h"
#include "etmetal/custom_ops.h"
#include "ops/gated_delta_rule.h"
#include "ops/gather_qmv.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_gather_qmv(AtenTensorHandle X, AtenTensorHandle W,
                                                    AtenTensorHandle S, AtenTensorHandle Z,
                                                    AtenTensorHandle ExpertIndices,
                                                    int64_t group_size, AtenTensorHandle* ret) {
  return guarded_encoding(__func__, [&] {
    require_out(ret, "ret");
    *ret = new_handle(etm::ops::gather_qmv(tensor_of(X), tensor_of(W), tensor_of(S), tensor_of(Z),
                                           tensor_of(ExpertIndices), group_size));
  });
}

extern "C" AOTITorchError aoti_torch_mps_gated_delta_rule(AtenTensorHandle Q, AtenTensorHandle K,
                                                          AtenTensorHandle V, AtenTensorHandle G,
                                                          AtenTensorHandle Beta,
                                                          AtenTensorHandle State,
                                                          AtenTensorHandle* retY) {
  return guarded_encoding(__func__, [&] {
    require_out(retY, "retY");
    *retY = new_handle(etm::ops::gated_delta_rule(tensor_of(Q), tensor_of(K), tensor_of(V),
                                                  tensor_of(G), tensor_of(Beta), tensor_of(State)));
  });
}
