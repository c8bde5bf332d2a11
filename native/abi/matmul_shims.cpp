// aoti_torch_mps_{mm,addmm,bmm,baddbmm}_out and aoti_torch_mps__grouped_mm (etmetal/fallback_matmul.h),
// and shim.h's aoti_torch__mm_plus_mm_out (etmetal/aoti_shim.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_matmul.h"
#include "ops/grouped_mm.h"
#include "ops/matmul.h"

using etm::abi::guarded_encoding;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                AtenTensorHandle mat2) {
  return guarded_encoding(__func__, [&] {
    etm::ops::mm_out(tensor_of(out), tensor_of(self), tensor_of(mat2));
  });
}

// torch's _mm_plus_mm_out: mm into out, then out += c @ d.
extern "C" AOTITorchError aoti_torch__mm_plus_mm_out(AtenTensorHandle out, AtenTensorHandle a,
                                                     AtenTensorHandle b, AtenTensorHandle c,
                                                     AtenTensorHandle d) {
  return guarded_encoding(__func__, [&] {
    const etm::Tensor& result = tensor_of(out);
    etm::ops::mm_out(result, tensor_of(a), tensor_of(b));
    etm::ops::addmm_out(result, result, tensor_of(c), tensor_of(d), 1.0, 1.0);
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

extern "C" AOTITorchError aoti_torch_mps__grouped_mm(AtenTensorHandle self, AtenTensorHandle mat2,
                                                     AtenTensorHandle* offs, AtenTensorHandle* bias,
                                                     int32_t* out_dtype, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    etm::abi::require_out(ret0, "ret0");
    ETM_REQUIRE(!bias || !*bias, "Bias not supported yet");
    const etm::Tensor* offsets = offs && *offs ? &tensor_of(*offs) : nullptr;
    *ret0 = etm::abi::new_handle(etm::ops::grouped_mm(tensor_of(self), tensor_of(mat2), offsets,
                                                      out_dtype ? std::optional<int32_t>(*out_dtype) : std::nullopt));
  });
}
