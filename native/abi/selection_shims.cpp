// aoti_torch_mps_nonzero, _nonzero_static, _masked_select, _masked_scatter, _repeat_interleave_Tensor
// (etmetal/fallback_reductions.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/selection.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_nonzero(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::nonzero(tensor_of(self)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_nonzero_static(AtenTensorHandle self, int64_t size,
                                                        int64_t fill_value, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::nonzero_static(tensor_of(self), size, fill_value));
  });
}

extern "C" AOTITorchError aoti_torch_mps_masked_select(AtenTensorHandle self, AtenTensorHandle mask,
                                                       AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::masked_select(tensor_of(self), tensor_of(mask)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_masked_scatter(AtenTensorHandle self, AtenTensorHandle mask,
                                                        AtenTensorHandle source, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::masked_scatter(tensor_of(self), tensor_of(mask), tensor_of(source)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_repeat_interleave_Tensor(AtenTensorHandle repeats,
                                                                  int64_t* output_size,
                                                                  AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::repeat_interleave(
        tensor_of(repeats), output_size ? std::optional<int64_t>(*output_size) : std::nullopt));
  });
}
