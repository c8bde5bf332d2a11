// aoti_torch_mps_cumsum (etmetal/fallback_reductions.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/scan.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_cumsum(AtenTensorHandle self, int64_t dim,
                                                int32_t* dtype, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::cumsum(tensor_of(self), dim,
                                        dtype ? std::optional<int32_t>(*dtype) : std::nullopt));
  });
}
