// aoti_torch_mps_histc (etmetal/fallback_reductions.h).
#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/histogram.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_histc(AtenTensorHandle self, int64_t bins, double min,
                                               double max, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::histc(tensor_of(self), bins, min, max));
  });
}
