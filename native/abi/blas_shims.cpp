// The matrix-vector, batch-summed and trilinear product fallbacks (etmetal/fallback_blas.h).
#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_blas.h"
#include "ops/matmul_compositions.h"
#include "ops/trilinear.h"

using etm::abi::guarded_encoding;
using etm::abi::int_list;
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

extern "C" AOTITorchError aoti_torch_mps__trilinear(AtenTensorHandle i1, AtenTensorHandle i2, AtenTensorHandle i3,
                                                   const int64_t* expand1, int64_t expand1_len_, const int64_t* expand2,
                                                   int64_t expand2_len_, const int64_t* expand3, int64_t expand3_len_,
                                                   const int64_t* sumdim, int64_t sumdim_len_, int64_t unroll_dim,
                                                   AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::trilinear(
        tensor_of(i1), tensor_of(i2), tensor_of(i3), int_list(expand1, expand1_len_, "expand1"),
        int_list(expand2, expand2_len_, "expand2"), int_list(expand3, expand3_len_, "expand3"),
        int_list(sumdim, sumdim_len_, "sumdim"), unroll_dim));
  });
}
