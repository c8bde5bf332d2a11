// c_shim_mps.h's shape and layout fallbacks (etmetal/fallback_shape.h).
#include <optional>
#include <string>
#include <vector>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_shape.h"
#include "ops/shape.h"

using etm::abi::check_factory_options;
using etm::abi::factory_dtype;
using etm::abi::guarded;
using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_factory_tensor;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

template <typename T>
std::optional<T> optional_of(const T* value) {
  return value ? std::optional<T>(*value) : std::nullopt;
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_cat(const AtenTensorHandle* tensors, int64_t tensors_len_, int64_t dim,
                                             AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    ETM_REQUIRE(tensors_len_ >= 0 && (tensors || tensors_len_ == 0), "tensors is null or has a negative length");
    std::vector<const etm::Tensor*> list;
    for (int64_t i = 0; i < tensors_len_; ++i) list.push_back(&tensor_of(tensors[i]));
    *ret0 = new_handle(etm::ops::cat(list, dim));
  });
}

extern "C" AOTITorchError aoti_torch_mps_pad(AtenTensorHandle self, const int64_t* pad, int64_t pad_len_,
                                             const char* mode, double* value, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(mode, "mode");
    *ret0 = new_handle(etm::ops::pad(tensor_of(self), int_list(pad, pad_len_, "pad"), mode, optional_of(value)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_reshape(AtenTensorHandle self, const int64_t* shape, int64_t shape_len_,
                                                 AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::reshape(tensor_of(self), int_list(shape, shape_len_, "shape")));
  });
}

extern "C" AOTITorchError aoti_torch_mps_permute(AtenTensorHandle self, const int64_t* dims, int64_t dims_len_,
                                                 AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::permute(tensor_of(self), int_list(dims, dims_len_, "dims")));
  });
}

extern "C" AOTITorchError aoti_torch_mps_narrow(AtenTensorHandle self, int64_t dim, int64_t start, int64_t length,
                                                AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::narrow(tensor_of(self), dim, start, length));
  });
}

extern "C" AOTITorchError aoti_torch_mps_slice_Tensor(AtenTensorHandle self, int64_t dim, int64_t* start,
                                                      int64_t* end, int64_t step, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::slice(tensor_of(self), dim, optional_of(start), optional_of(end), step));
  });
}

extern "C" AOTITorchError aoti_torch_mps_squeeze_dim(AtenTensorHandle self, int64_t dim, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::squeeze_dim(tensor_of(self), dim));
  });
}

extern "C" AOTITorchError aoti_torch_mps_view_dtype(AtenTensorHandle self, int32_t dtype, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::view_dtype(tensor_of(self), dtype));
  });
}

extern "C" AOTITorchError aoti_torch_mps_fill__Scalar(AtenTensorHandle self, double value) {
  return guarded_encoding(__func__, [&] { etm::ops::fill(tensor_of(self), value); });
}

extern "C" AOTITorchError aoti_torch_mps__efficientzerotensor(const int64_t* size, int64_t size_len_, int32_t* dtype,
                                                              int32_t* layout, int32_t* device, int32_t device_index_,
                                                              int32_t* pin_memory, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    check_factory_options(layout, device, device_index_, pin_memory);
    auto out = new_factory_tensor(int_list(size, size_len_, "size"),
                                  factory_dtype(dtype, static_cast<int32_t>(etm::DType::float32)));
    etm::ops::fill(*out, 0.0);
    *ret0 = new_handle(std::move(out));
  });
}
