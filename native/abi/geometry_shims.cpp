// The sampling and distance fallbacks (etmetal/fallback_geometry.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_geometry.h"
#include "ops/distance.h"
#include "ops/grid_sampler.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_grid_sampler_3d(AtenTensorHandle input, AtenTensorHandle grid,
                                                        int64_t interpolation_mode, int64_t padding_mode,
                                                        int32_t align_corners, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::grid_sampler_3d(tensor_of(input), tensor_of(grid), interpolation_mode, padding_mode,
                                                 align_corners != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps__cdist_forward(AtenTensorHandle x1, AtenTensorHandle x2, double p,
                                                       int64_t* compute_mode, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::cdist(tensor_of(x1), tensor_of(x2), p,
                                       compute_mode ? std::optional<int64_t>(*compute_mode) : std::nullopt));
  });
}
