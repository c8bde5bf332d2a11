// Other libraries' mixture-of-experts ops (etmetal/fallback_experts.h).
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_experts.h"
#include "ops/grouped_mm.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

// The same product as torch._grouped_mm(input, weight, offs) for a 2-D input and 3-D weights.
extern "C" AOTITorchError aoti_torch_mps_grouped_mm_fallback(AtenTensorHandle input,
                                                                          AtenTensorHandle weight,
                                                                          AtenTensorHandle offs,
                                                                          AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    const etm::Tensor& a = tensor_of(input);
    const etm::Tensor& b = tensor_of(weight);
    ETM_REQUIRE(a.dim() == 2 && b.dim() == 3, "grouped_mm_fallback: input must be 2-D and weight 3-D, got ",
                a.dim(), "-D and ", b.dim(), "-D");
    *ret0 = new_handle(etm::ops::grouped_mm(a, b, &tensor_of(offs), std::nullopt));
  });
}
