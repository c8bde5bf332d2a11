// aoti_torch_mps_{mm,addmm,bmm,baddbmm}_out (etmetal/fallback_matmul.h).
#include "abi/guard.h"
#include "etmetal/fallback_matmul.h"
#include "ops/matmul.h"

using etm::abi::guarded_encoding;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                AtenTensorHandle mat2) {
  return guarded_encoding(__func__, [&] {
    etm::ops::mm_out(tensor_of(out), tensor_of(self), tensor_of(mat2));
  });
}

extern "C" AOTITorchError aoti_torch_mps_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                   AtenTensorHandle mat1, AtenTensorHandle mat2,
                                                   double beta, double alpha) {
  return guarded_encoding(__func__, [&] {
    etm::ops::addmm_out(tensor_of(out), tensor_of(self), tensor_of(mat1), tensor_of(mat2), beta,
                        alpha);
  });
}

extern "C" AOTITorchError aoti_torch_mps_bmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                 AtenTensorHandle mat2) {
  return guarded_encoding(__func__, [&] {
    etm::ops::bmm_out(tensor_of(out), tensor_of(self), tensor_of(mat2));
  });
}

extern "C" AOTITorchError aoti_torch_mps_baddbmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                     AtenTensorHandle batch1,
                                                     AtenTensorHandle batch2, double beta,
                                                     double alpha) {
  return guarded_encoding(__func__, [&] {
    etm::ops::baddbmm_out(tensor_of(out), tensor_of(self), tensor_of(batch1), tensor_of(batch2),
                          beta, alpha);
  });
}
