// The window, permutation and dropout fallbacks (etmetal/fallback_factories.h).
#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_factories.h"
#include "ops/factories.h"

using etm::abi::check_factory_options;
using etm::abi::factory_dtype;
using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_hann_window(int64_t window_length, int32_t* dtype, int32_t* layout,
                                                    int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                                    AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    check_factory_options(layout, device, device_index_, pin_memory);
    const int32_t window_dtype = factory_dtype(dtype, static_cast<int32_t>(etm::DType::float32));
    *ret0 = new_handle(etm::ops::hann_window(window_length, window_dtype));
  });
}

extern "C" AOTITorchError aoti_torch_mps_randperm(int64_t n, int32_t* dtype, int32_t* layout, int32_t* device,
                                                 int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    check_factory_options(layout, device, device_index_, pin_memory);
    *ret0 = new_handle(etm::ops::randperm(n, factory_dtype(dtype, static_cast<int32_t>(etm::DType::int64))));
  });
}

extern "C" AOTITorchError aoti_torch_mps_native_dropout(AtenTensorHandle input, double p, int32_t* train,
                                                       AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    etm::ops::DropoutOutputs outputs = etm::ops::native_dropout(tensor_of(input), p, !train || *train != 0);
    *ret0 = new_handle(std::move(outputs.output));
    *ret1 = new_handle(std::move(outputs.mask));
  });
}
