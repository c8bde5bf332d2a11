// The 3-D pooling and max-unpooling fallbacks (etmetal/fallback_pooling3d.h).
#include <optional>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_pooling3d.h"
#include "ops/pooling3d.h"

using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_max_pool3d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    etm::ops::PoolOutputs outputs = etm::ops::max_pool3d_with_indices(
        tensor_of(self), int_list(kernel_size, kernel_size_len_, "kernel_size"),
        int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"),
        int_list(dilation, dilation_len_, "dilation"), ceil_mode != 0);
    *ret0 = new_handle(std::move(outputs.values));
    *ret1 = new_handle(std::move(outputs.indices));
  });
}

extern "C" AOTITorchError aoti_torch_mps_avg_pool3d(AtenTensorHandle self, const int64_t* kernel_size,
                                                   int64_t kernel_size_len_, const int64_t* stride, int64_t stride_len_,
                                                   const int64_t* padding, int64_t padding_len_, int32_t ceil_mode,
                                                   int32_t count_include_pad, int64_t* divisor_override,
                                                   AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::avg_pool3d(
        tensor_of(self), int_list(kernel_size, kernel_size_len_, "kernel_size"),
        int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"), ceil_mode != 0, count_include_pad != 0,
        divisor_override ? std::optional<int64_t>(*divisor_override) : std::nullopt));
  });
}

extern "C" AOTITorchError aoti_torch_mps_max_unpool2d(AtenTensorHandle self, AtenTensorHandle indices,
                                                     const int64_t* output_size, int64_t output_size_len_,
                                                     AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::max_unpool(tensor_of(self), tensor_of(indices), 2,
                                            int_list(output_size, output_size_len_, "output_size"), {}, {}));
  });
}

extern "C" AOTITorchError aoti_torch_mps_max_unpool3d(AtenTensorHandle self, AtenTensorHandle indices,
                                                     const int64_t* output_size, int64_t output_size_len_,
                                                     const int64_t* stride, int64_t stride_len_, const int64_t* padding,
                                                     int64_t padding_len_, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::max_unpool(tensor_of(self), tensor_of(indices), 3,
                                            int_list(output_size, output_size_len_, "output_size"),
                                            int_list(stride, stride_len_, "stride"),
                                            int_list(padding, padding_len_, "padding")));
  });
}
