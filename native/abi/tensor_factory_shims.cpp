// More aoti_torch_* tensor functions of torch's shim.h (etmetal/aoti_shim.h): memory-format
// codes, 0-dim CPU tensors from scalars, as_strided, zero_, and the proxy-executor and
// dispatcher entry points, which exist only to fail clearly.
#include <cstring>
#include <string>

#include "abi/guard.h"
#include "abi/scalar_types.h"
#include "etmetal/aoti_shim.h"
#include "etmetal/aoti_shim_unavailable.h"
#include "runtime/dtype.h"

using namespace etm;
using etm::abi::guarded;
using etm::abi::guarded_encoding;
using etm::abi::require_out;
using etm::abi::tensor_of;

// c10::MemoryFormat codes.
extern "C" int32_t aoti_torch_memory_format_contiguous_format(void) { return 0; }
extern "C" int32_t aoti_torch_memory_format_preserve_format(void) { return 1; }
extern "C" int32_t aoti_torch_memory_format_channels_last(void) { return 2; }
extern "C" int32_t aoti_torch_memory_format_channels_last_3d(void) { return 3; }

namespace {

// A 0-dim CPU tensor holding `value` (torch's at::scalar_to_tensor).
template <typename T>
AOTITorchError scalar_to_tensor(const char* function, T value, DType dtype, AtenTensorHandle* ret) {
  return guarded(function, [&] {
    require_out(ret, "ret_new_tensor");
    auto tensor = Runtime::get().empty_tensor({}, {}, static_cast<int32_t>(dtype), kDeviceCpu);
    std::memcpy(tensor->data(), &value, sizeof value);
    *ret = abi::new_handle(std::move(tensor));
  });
}

}  // namespace

#define SCALAR_TO_TENSOR(name, ctype, dtype)                                                     \
  extern "C" AOTITorchError aoti_torch_scalar_to_tensor_##name(ctype value, AtenTensorHandle* ret) { \
    return scalar_to_tensor(__func__, value, DType::dtype, ret);                                 \
  }
ETM_ABI_SCALAR_TYPES(SCALAR_TO_TENSOR)
SCALAR_TO_TENSOR(complex64, etmetal_complex64, complex64)
SCALAR_TO_TENSOR(complex128, etmetal_complex128, complex128)
#undef SCALAR_TO_TENSOR

// torch's as_strided: a view of self's storage with self's dim() sizes and strides, starting
// at self's storage offset, which must fit in the storage's size (not just its allocation).
extern "C" AOTITorchError aoti_torch_as_strided(AtenTensorHandle self, const int64_t* sizes_ptr,
                                                const int64_t* strides_ptr, AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    const Tensor& source = tensor_of(self);
    const int64_t ndim = source.dim();
    ETM_REQUIRE(ndim == 0 || (sizes_ptr && strides_ptr), "sizes and strides must not be null");
    const int64_t extent = checked_extent(ndim, sizes_ptr, strides_ptr, source.storage_offset);
    const size_t needed = storage_nbytes(extent, source.dtype);
    ETM_REQUIRE(needed <= source.storage->nbytes, "the view needs ", needed,
                " bytes of storage, past the end of its storage of ", source.storage->nbytes);
    auto view = std::make_unique<Tensor>(source);
    view->sizes.assign(sizes_ptr, sizes_ptr + ndim);
    view->strides.assign(strides_ptr, strides_ptr + ndim);
    *ret = abi::new_handle(std::move(view));
  });
}

// Fills self with zeros in stream order: one fill when its elements are one dense block,
// else element by element on the host once the stream is idle (any strides).
// Generated code checks this call's return code, so a failure does not poison the stream.
extern "C" AOTITorchError aoti_torch_zero_(AtenTensorHandle self) {
  return guarded(__func__, [&] {
    const Tensor& tensor = tensor_of(self);
    ETM_REQUIRE(is_tensor_dtype(tensor.dtype), "unsupported dtype ", dtype_name(tensor.dtype));
    if (tensor.numel() == 0) return;
    Stream& stream = Runtime::get().current_stream();
    if (tensor.device_type == kDeviceMps && tensor.storage->buffer && tensor.is_contiguous()) {
      stream.fill_buffer(tensor.storage->buffer, tensor.buffer_offset(),
                         static_cast<size_t>(tensor.numel()) * tensor.itemsize(), 0);
      return;
    }
    auto zero = Runtime::get().empty_tensor({}, {}, tensor.dtype, kDeviceCpu);
    std::memset(zero->data(), 0, zero->itemsize());
    stream.wait_idle();
    copy_elements(tensor, *zero);
  });
}

// Ops without a C shim run through libtorch's proxy executor, which this runtime does not
// have; the generated call names only the op's index among the package's extern nodes. The
// stream is poisoned too, so a caller that ignores the code still hears of it.
extern "C" AOTITorchError aoti_torch_proxy_executor_call_function(
    struct AOTIProxyExecutorOpaque* proxy_executor, int extern_node_index, int num_ints,
    int64_t* flatten_int_args, int num_tensors, AtenTensorHandle* flatten_tensor_args) {
  (void)proxy_executor;
  (void)num_ints;
  (void)flatten_int_args;
  (void)num_tensors;
  (void)flatten_tensor_args;
  return guarded_encoding(__func__, [&] {
    throw Error(concat("the model calls extern kernel node ", extern_node_index,
                       " (an op without a C shim) through libtorch's proxy executor, which "
                       "etmetal does not have; the package's <wrapper>.json names the op. "
                       "Register a C shim for it or compile the model without it"));
  });
}

// Stable-ABI custom kernels call other ops through libtorch's dispatcher, which this runtime
// does not have.
extern "C" AOTITorchError aoti_torch_call_dispatcher(const char* opName, const char* overloadName,
                                                     StableIValue* stack) {
  (void)stack;
  return guarded_encoding(__func__, [&] {
    const std::string op = opName ? opName : "(null op name)";
    const std::string overload = overloadName && *overloadName ? concat(".", overloadName) : std::string();
    throw Error(concat("the model calls aten op ", op, overload,
                       " through libtorch's dispatcher, which etmetal does not have. Register a C shim "
                       "for it or compile the model without it"));
  });
}
