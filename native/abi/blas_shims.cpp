// The matrix-vector and batch-summed product fallbacks (etmetal/fallback_blas.h).
#include "abi/guard.h"
#include "etmetal/fallback_blas.h"
#include "ops/matmul_compositions.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_addmv(AtenTensorHandle self, AtenTensorHandle mat, AtenTensorHandle vec,
                                              double beta, double alpha, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::addmv(tensor_of(self), tensor_of(mat), tensor_of(vec), beta, alpha));
  });
}

extern "C" AOTITorchError aoti_torch_mps_addbmm(AtenTensorHandle self, AtenTensorHandle batch1,
                                               AtenTensorHandle batch2, double beta, double alpha,
                                               AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::addbmm(tensor_of(self), tensor_of(batch1), tensor_of(batch2), beta, alpha));
  });
}
