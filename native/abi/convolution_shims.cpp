// aoti_torch_mps_convolution and the pooling fallbacks (etmetal/fallback_convolution.h).
#include <optional>
#include <vector>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_convolution.h"
#include "ops/convolution.h"
#include "ops/pooling.h"

using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t transposed, const int64_t* output_padding,
    int64_t output_padding_len_, int64_t groups, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    etm::ops::ConvolutionOptions options;
    options.stride = int_list(stride, stride_len_, "stride");
    options.padding = int_list(padding, padding_len_, "padding");
    options.dilation = int_list(dilation, dilation_len_, "dilation");
    options.transposed = transposed != 0;
    options.output_padding = int_list(output_padding, output_padding_len_, "output_padding");
    options.groups = groups;
    const etm::Tensor* bias_tensor = nullptr;
    if (bias) {
      ETM_REQUIRE(*bias, "convolution: bias points to a null handle (pass a null pointer for no bias)");
      bias_tensor = &tensor_of(*bias);
    }
    *ret0 = new_handle(etm::ops::convolution(tensor_of(input), tensor_of(weight), bias_tensor, options));
  });
}

extern "C" AOTITorchError aoti_torch_mps_max_pool2d_with_indices(
    AtenTensorHandle self, const int64_t* kernel_size, int64_t kernel_size_len_, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation,
    int64_t dilation_len_, int32_t ceil_mode, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    etm::ops::PoolOutputs outputs = etm::ops::max_pool2d_with_indices(
        tensor_of(self), int_list(kernel_size, kernel_size_len_, "kernel_size"),
        int_list(stride, stride_len_, "stride"), int_list(padding, padding_len_, "padding"),
        int_list(dilation, dilation_len_, "dilation"), ceil_mode != 0);
    *ret0 = new_handle(std::move(outputs.values));
    *ret1 = new_handle(std::move(outputs.indices));
  });
}

extern "C" AOTITorchError aoti_torch_mps_avg_pool2d(AtenTensorHandle self, const int64_t* kernel_size,
                                                   int64_t kernel_size_len_, const int64_t* stride, int64_t stride_len_,
                                                   const int64_t* padding, int64_t padding_len_, int32_t ceil_mode,
                                                   int32_t count_include_pad, int64_t* divisor_override,
                                                   AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::avg_pool2d(
        tensor_of(self), int_list(kernel_size, kernel_size_len_, "kernel_size"), int_list(stride, stride_len_, "stride"),
        int_list(padding, padding_len_, "padding"), ceil_mode != 0, count_include_pad != 0,
        divisor_override ? std::optional<int64_t>(*divisor_override) : std::nullopt));
  });
}

extern "C" AOTITorchError aoti_torch_mps__adaptive_avg_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                             int64_t output_size_len_, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(
        etm::ops::adaptive_pool2d(tensor_of(self), int_list(output_size, output_size_len_, "output_size"), false)
            .values);
  });
}

extern "C" AOTITorchError aoti_torch_mps_adaptive_max_pool2d(AtenTensorHandle self, const int64_t* output_size,
                                                            int64_t output_size_len_, AtenTensorHandle* ret0,
                                                            AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    etm::ops::PoolOutputs outputs =
        etm::ops::adaptive_pool2d(tensor_of(self), int_list(output_size, output_size_len_, "output_size"), true);
    *ret0 = new_handle(std::move(outputs.values));
    *ret1 = new_handle(std::move(outputs.indices));
  });
}
