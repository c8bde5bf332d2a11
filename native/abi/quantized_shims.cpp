// Weight-quantized linear layers: torch's aoti_torch_mps__weight_int{4,8}pack_mm
// (etmetal/fallback_quantized.h) and torchao's aoti_torch_mps__linear_fp_act_{1..7}bit_weight
// (etmetal/custom_ops.h).
#include "abi/guard.h"
#include "etmetal/custom_ops.h"
#include "etmetal/fallback_quantized.h"
#include "ops/quantized_linear.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

AOTITorchError linear_lowbit(const char* function, int bits, AtenTensorHandle A,
                             AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,
                             AtenTensorHandle Z, AtenTensorHandle* ret) {
  return guarded_encoding(function, [&] {
    require_out(ret, "ret");
    *ret = new_handle(etm::ops::linear_fp_act_lowbit_weight(bits, tensor_of(A), tensor_of(B),
                                                             group_size, tensor_of(S),
                                                             tensor_of(Z)));
  });
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps__weight_int4pack_mm(AtenTensorHandle self,
                                                             AtenTensorHandle mat2,
                                                             int64_t qGroupSize,
                                                             AtenTensorHandle qScaleAndZeros,
                                                             AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::weight_int4pack_mm(tensor_of(self), tensor_of(mat2), qGroupSize,
                                                    tensor_of(qScaleAndZeros)));
  });
}

extern "C" AOTITorchError aoti_torch_mps__weight_int8pack_mm(AtenTensorHandle self,
                                                             AtenTensorHandle mat2,
                                                             AtenTensorHandle scales,
                                                             AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(
        etm::ops::weight_int8pack_mm(tensor_of(self), tensor_of(mat2), tensor_of(scales)));
  });
}

#define ETM_LINEAR_LOWBIT_SHIM(BITS)                                                         \
  extern "C" AOTITorchError aoti_torch_mps__linear_fp_act_##BITS##bit_weight(               \
      AtenTensorHandle A, AtenTensorHandle B, int64_t group_size, AtenTensorHandle S,       \
      AtenTensorHandle Z, AtenTensorHandle* ret) {                                          \
    return linear_lowbit(__func__, BITS, A, B, group_size, S, Z, ret);                      \
  }

ETM_LINEAR_LOWBIT_SHIM(1)
ETM_LINEAR_LOWBIT_SHIM(2)
ETM_LINEAR_LOWBIT_SHIM(3)
ETM_LINEAR_LOWBIT_SHIM(4)
ETM_LINEAR_LOWBIT_SHIM(5)
ETM_LINEAR_LOWBIT_SHIM(6)
ETM_LINEAR_LOWBIT_SHIM(7)
