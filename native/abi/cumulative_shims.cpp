// aoti_torch_mps_cumsum, _cumprod, _cummax, _cummin, _logcumsumexp (etmetal/fallback_reductions.h).
#include <memory>
#include <optional>

#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/cumulative.h"
#include "ops/op_support.h"
#include "ops/scan.h"
#include "runtime/dtype.h"
#include "runtime/runtime.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

using RunningOp = std::unique_ptr<etm::Tensor> (*)(const etm::Tensor&, int64_t, std::optional<int32_t>);

// cumsum and cumprod: one result, in *dtype when given. torch casts the input to dtype first;
// the kernels take a floating input only to a floating result, so a floating input asked for an
// integer result is converted here (on the host, after the stream is idle; transformers' MoE
// path does this to histc's counts).
AOTITorchError running(const char* function, RunningOp op, AtenTensorHandle self, int64_t dim, int32_t* dtype,
                       AtenTensorHandle* ret0) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    const etm::Tensor& input = tensor_of(self);
    std::unique_ptr<etm::Tensor> converted;
    if (dtype && etm::ops::is_floating(input.dtype) && etm::is_tensor_dtype(*dtype) && !etm::ops::is_floating(*dtype) &&
        etm::ops::msl_element_type_name(*dtype)) {
      converted = etm::Runtime::get().empty_tensor(input.sizes, etm::contiguous_strides(input.sizes), *dtype);
      etm::Runtime::get().copy_tensor(*converted, input);
    }
    *ret0 = new_handle(op(converted ? *converted : input, dim, dtype ? std::optional<int32_t>(*dtype) : std::nullopt));
  });
}

AOTITorchError extreme(const char* function, AtenTensorHandle self, int64_t dim, bool max,
                       AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    auto [values, indices] = etm::ops::cumulative_extreme(tensor_of(self), dim, max);
    *ret0 = new_handle(std::move(values));
    *ret1 = new_handle(std::move(indices));
  });
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_cumsum(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                AtenTensorHandle* ret0) {
  return running(__func__, etm::ops::cumsum, self, dim, dtype, ret0);
}

extern "C" AOTITorchError aoti_torch_mps_cumprod(AtenTensorHandle self, int64_t dim, int32_t* dtype,
                                                 AtenTensorHandle* ret0) {
  return running(__func__, etm::ops::cumprod, self, dim, dtype, ret0);
}

extern "C" AOTITorchError aoti_torch_mps_cummax(AtenTensorHandle self, int64_t dim,
                                                AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return extreme(__func__, self, dim, true, ret0, ret1);
}

extern "C" AOTITorchError aoti_torch_mps_cummin(AtenTensorHandle self, int64_t dim,
                                                AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return extreme(__func__, self, dim, false, ret0, ret1);
}

extern "C" AOTITorchError aoti_torch_mps_logcumsumexp(AtenTensorHandle self, int64_t dim,
                                                      AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::logcumsumexp(tensor_of(self), dim));
  });
}
