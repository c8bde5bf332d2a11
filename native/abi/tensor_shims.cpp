// aoti_torch_* tensor functions (etmetal/aoti_shim.h) and etmetal_tensor_from_blob_in_place
// (etmetal/etmetal.h), its sibling for callers that copy instead.
#include <cstring>

#include "abi/guard.h"
#include "abi/scalar_types.h"
#include "etmetal/aoti_shim.h"
#include "etmetal/etmetal.h"
#include "device/tls_model.h"
#include "runtime/dtype.h"

using namespace etm;
using etm::abi::guarded;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace etm::abi {

namespace {

void check_device(int32_t device_type, int32_t device_index) {
  ETM_REQUIRE(device_type == kDeviceCpu || device_type == kDeviceMps, "unsupported device type ",
              device_type, " (etmetal has cpu = 0 and mps = 13)");
  require_device_index(device_index);
}

std::vector<int64_t> layout_strides(int64_t ndim, const int64_t* sizes, const int64_t* strides) {
  std::vector<int64_t> size_vector(sizes, sizes + ndim);
  if (!strides) return contiguous_strides(size_vector);
  return std::vector<int64_t>(strides, strides + ndim);
}

}  // namespace

// Null where the device cannot use `data` in place and the caller asked for `in_place_only`.
std::unique_ptr<Tensor> make_blob_tensor(void* data, int64_t ndim, const int64_t* sizes,
                                         const int64_t* strides, int64_t storage_offset,
                                         int32_t dtype, int32_t device_type, int32_t device_index,
                                         bool in_place_only = false) {
  check_device(device_type, device_index);
  checked_extent(ndim, sizes, strides, storage_offset);
  Runtime& runtime = Runtime::get();
  std::vector<int64_t> size_vector(sizes, sizes + ndim);
  std::vector<int64_t> stride_vector = layout_strides(ndim, sizes, strides);
  if (in_place_only) {
    return runtime.blob_tensor_in_place(data, std::move(size_vector), std::move(stride_vector),
                                        storage_offset, dtype, device_type);
  }
  return runtime.blob_tensor(data, std::move(size_vector), std::move(stride_vector),
                             storage_offset, dtype, device_type);
}

}  // namespace etm::abi

#define DEVICE_TYPE_GETTER(name, value) \
  extern "C" int32_t aoti_torch_device_type_##name(void) { return value; }
DEVICE_TYPE_GETTER(cpu, 0)
DEVICE_TYPE_GETTER(cuda, 1)
DEVICE_TYPE_GETTER(xpu, 12)
DEVICE_TYPE_GETTER(mps, 13)
DEVICE_TYPE_GETTER(meta, 14)
DEVICE_TYPE_GETTER(privateuse1, 20)

#define DTYPE_GETTER(name) \
  extern "C" int32_t aoti_torch_dtype_##name(void) { return static_cast<int32_t>(DType::name); }
DTYPE_GETTER(float8_e5m2)
DTYPE_GETTER(float8_e4m3fn)
DTYPE_GETTER(float8_e5m2fnuz)
DTYPE_GETTER(float8_e4m3fnuz)
DTYPE_GETTER(float8_e8m0fnu)
DTYPE_GETTER(float4_e2m1fn_x2)
DTYPE_GETTER(bfloat16)
DTYPE_GETTER(float16)
DTYPE_GETTER(float32)
DTYPE_GETTER(float64)
DTYPE_GETTER(uint8)
DTYPE_GETTER(uint16)
DTYPE_GETTER(uint32)
DTYPE_GETTER(uint64)
DTYPE_GETTER(int8)
DTYPE_GETTER(int16)
DTYPE_GETTER(int32)
DTYPE_GETTER(int64)
DTYPE_GETTER(complex32)
DTYPE_GETTER(complex64)
DTYPE_GETTER(complex128)
extern "C" int32_t aoti_torch_dtype_bool(void) { return static_cast<int32_t>(DType::bool_); }

extern "C" size_t aoti_torch_dtype_element_size(int32_t dtype) {
  size_t size = 0;
  guarded(__func__, [&] { size = element_size(dtype); });
  return size;
}

extern "C" int32_t aoti_torch_layout_strided(void) { return 0; }
extern "C" int32_t aoti_torch_layout_sparse_coo(void) { return 1; }
extern "C" int32_t aoti_torch_layout_sparse_csr(void) { return 2; }
extern "C" int32_t aoti_torch_layout__mkldnn(void) { return 3; }
extern "C" int32_t aoti_torch_layout_sparse_csc(void) { return 4; }
extern "C" int32_t aoti_torch_layout_sparse_bsr(void) { return 5; }
extern "C" int32_t aoti_torch_layout_sparse_bsc(void) { return 6; }
extern "C" int32_t aoti_torch_layout_jagged(void) { return 7; }

extern "C" uint64_t aoti_torch_abi_version(void) {
  return (uint64_t{2} << 56) | (uint64_t{13} << 48) | (uint64_t{0} << 40);
}

namespace {
ETM_THREAD_LOCAL bool grad_mode_enabled = true;
}

extern "C" bool aoti_torch_grad_mode_is_enabled(void) { return grad_mode_enabled; }
extern "C" void aoti_torch_grad_mode_set_enabled(bool enabled) { grad_mode_enabled = enabled; }

extern "C" AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr,
                                                   const int64_t* strides_ptr, int32_t dtype,
                                                   int32_t device_type, int32_t device_index,
                                                   AtenTensorHandle* ret_new_tensor) {
  return guarded(__func__, [&] {
    require_out(ret_new_tensor, "ret_new_tensor");
    abi::check_device(device_type, device_index);
    checked_extent(ndim, sizes_ptr, strides_ptr, 0);
    *ret_new_tensor = abi::new_handle(Runtime::get().empty_tensor(
        std::vector<int64_t>(sizes_ptr, sizes_ptr + ndim),
        abi::layout_strides(ndim, sizes_ptr, strides_ptr), dtype, device_type));
  });
}

extern "C" AOTITorchError aoti_torch_empty_strided_pinned(int64_t ndim, const int64_t* sizes_ptr,
                                                          const int64_t* strides_ptr, int32_t dtype,
                                                          int32_t device_type, int32_t device_index,
                                                          AtenTensorHandle* ret_new_tensor) {
  if (device_type != kDeviceCpu) {
    return guarded(__func__, [&] {
      throw Error(concat("pinned memory is host memory: device_type must be cpu (0), not ", device_type));
    });
  }
  return aoti_torch_empty_strided(ndim, sizes_ptr, strides_ptr, dtype, device_type, device_index, ret_new_tensor);
}

extern "C" AOTITorchError aoti_torch_create_tensor_from_blob(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    *ret = abi::new_handle(abi::make_blob_tensor(data, ndim, sizes_ptr, strides_ptr, storage_offset,
                                                 dtype, device_type, device_index));
  });
}

extern "C" AOTITorchError etmetal_tensor_from_blob_in_place(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    auto tensor = abi::make_blob_tensor(data, ndim, sizes_ptr, strides_ptr, storage_offset, dtype,
                                        device_type, device_index, true);
    *ret = tensor ? abi::new_handle(std::move(tensor)) : nullptr;
  });
}

extern "C" AOTITorchError aoti_torch_create_tensor_from_blob_v2(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret, int32_t layout, const uint8_t* opaque_metadata,
    int64_t opaque_metadata_size) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    ETM_REQUIRE(layout == 0, "layout ", layout, " is not supported (only strided, 0)");
    ETM_REQUIRE(opaque_metadata_size >= 0, "negative opaque metadata size ", opaque_metadata_size);
    ETM_REQUIRE(opaque_metadata == nullptr || opaque_metadata_size == 0,
                "opaque tensor metadata is not supported");
    *ret = abi::new_handle(abi::make_blob_tensor(data, ndim, sizes_ptr, strides_ptr, storage_offset,
                                                 dtype, device_type, device_index));
  });
}

extern "C" AOTITorchError aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim,
                                                         const int64_t* sizes_ptr,
                                                         const int64_t* strides_ptr,
                                                         int64_t storage_offset,
                                                         AtenTensorHandle* ret_new_tensor) {
  return guarded(__func__, [&] {
    require_out(ret_new_tensor, "ret_new_tensor");
    const Tensor& source = tensor_of(self);
    int64_t offset;
    ETM_REQUIRE(!__builtin_add_overflow(source.storage_offset, storage_offset, &offset),
                "storage offset overflows");
    const int64_t extent = checked_extent(ndim, sizes_ptr, strides_ptr, offset);
    // The view may reach past the storage's nominal size but never past its allocation.
    ETM_REQUIRE(storage_nbytes(extent, source.dtype) <= source.storage->capacity,
                "view reaches ", extent, " elements, past the end of its storage");
    auto view = std::make_unique<Tensor>(source);
    view->sizes.assign(sizes_ptr, sizes_ptr + ndim);
    view->strides = abi::layout_strides(ndim, sizes_ptr, strides_ptr);
    view->storage_offset = offset;
    *ret_new_tensor = abi::new_handle(std::move(view));
  });
}

// torch's at::Tensor(): a handle to no tensor, which aoti_torch_assign_tensors may later make
// an alias; every other use fails with "undefined tensor".
extern "C" AOTITorchError aoti_torch_new_uninitialized_tensor(AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    auto tensor = std::make_unique<Tensor>();
    tensor->storage = nullptr;
    *ret = abi::new_handle(std::move(tensor));
  });
}

// torch's _alloc_from_pool: a view of self's storage (self must start at its storage's start)
// from byte offset_bytes on, with its own dtype, sizes and strides, inside the allocation.
extern "C" AOTITorchError aoti_torch__alloc_from_pool(AtenTensorHandle self, int64_t offset_bytes, int32_t dtype,
                                                      int64_t ndim, const int64_t* sizes_ptr,
                                                      const int64_t* strides_ptr, AtenTensorHandle* ret_new_tensor) {
  return guarded(__func__, [&] {
    require_out(ret_new_tensor, "ret_new_tensor");
    const Tensor& pool = tensor_of(self);
    ETM_REQUIRE(pool.storage_offset == 0, "the pool tensor must start at its storage's start (storage offset ",
                pool.storage_offset, ")");
    ETM_REQUIRE(is_tensor_dtype(dtype), "unsupported dtype ", dtype);
    const int64_t item = static_cast<int64_t>(element_size(dtype));
    ETM_REQUIRE(offset_bytes >= 0 && offset_bytes % item == 0, "offset_bytes ", offset_bytes,
                " is not a non-negative multiple of the element size ", item);
    const int64_t extent = checked_extent(ndim, sizes_ptr, strides_ptr, offset_bytes / item);
    ETM_REQUIRE(storage_nbytes(extent, dtype) <= pool.storage->capacity, "the view reaches ",
                storage_nbytes(extent, dtype), " bytes, past the end of the pool's ", pool.storage->capacity);
    auto view = std::make_unique<Tensor>(pool);
    view->dtype = dtype;
    view->sizes.assign(sizes_ptr, sizes_ptr + ndim);
    view->strides = abi::layout_strides(ndim, sizes_ptr, strides_ptr);
    view->storage_offset = offset_bytes / item;
    *ret_new_tensor = abi::new_handle(std::move(view));
  });
}

extern "C" AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor) {
  return guarded(__func__, [&] { abi::handles().tensors.remove(tensor); });
}

extern "C" AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle,
                                                       AtenTensorHandle* new_handle) {
  return guarded(__func__, [&] {
    require_out(new_handle, "new_handle");
    *new_handle = abi::new_handle(std::make_unique<Tensor>(tensor_of(orig_handle)));
  });
}

extern "C" AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    const Tensor& source = tensor_of(self);
    auto copy = Runtime::get().empty_tensor(source.sizes, contiguous_strides(source.sizes), source.dtype,
                                       source.device_type);
    Runtime::get().copy_tensor(*copy, source);
    *ret = abi::new_handle(std::move(copy));
  });
}

extern "C" AOTITorchError aoti_torch_clone_preserve_strides(AtenTensorHandle self,
                                                            AtenTensorHandle* ret) {
  return guarded(__func__, [&] {
    require_out(ret, "ret");
    const Tensor& source = tensor_of(self);
    auto copy = Runtime::get().empty_tensor(source.sizes, source.strides, source.dtype,
                                       source.device_type);
    const size_t bytes = source.reach_bytes();
    if (bytes > 0) {
      Runtime::get().current_stream().copy_buffer(
          source.storage->buffer, source.buffer_offset(), copy->storage->buffer, copy->storage->buffer_offset, bytes);
    }
    *ret = abi::new_handle(std::move(copy));
  });
}

extern "C" AOTITorchError aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src,
                                           int32_t non_blocking) {
  (void)non_blocking;  // copies are always ordered on the stream; host copies wait for it
  return guarded(__func__, [&] { Runtime::get().copy_tensor(tensor_of(self), tensor_of(src)); });
}

extern "C" AOTITorchError aoti_torch_tensor_copy_(AtenTensorHandle src, AtenTensorHandle dst) {
  return guarded(__func__, [&] { Runtime::get().copy_tensor(tensor_of(dst), tensor_of(src)); });
}

extern "C" AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr) {
  return guarded(__func__, [&] {
    require_out(ret_data_ptr, "ret_data_ptr");
    const Tensor& t = tensor_of(tensor);
    // The host may touch the memory next: another thread's committed work on it goes first.
    if (t.storage) Runtime::get().current_stream().wait_for_other_streams(t.storage->buffer);
    *ret_data_ptr = t.data();
  });
}

extern "C" AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret_size) {
  return guarded(__func__, [&] {
    *require_out(ret_size, "ret_size") = static_cast<int64_t>(tensor_of(tensor).storage->nbytes);
  });
}

extern "C" AOTITorchError aoti_torch_get_storage_numel(AtenTensorHandle tensor, int64_t* ret_numel) {
  return guarded(__func__, [&] {
    const Tensor& t = tensor_of(tensor);
    *require_out(ret_numel, "ret_numel") = static_cast<int64_t>(t.storage->nbytes / t.itemsize());
  });
}

extern "C" AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim) {
  return guarded(__func__, [&] { *require_out(ret_dim, "ret_dim") = tensor_of(tensor).dim(); });
}

extern "C" AOTITorchError aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret_numel) {
  return guarded(__func__, [&] { *require_out(ret_numel, "ret_numel") = tensor_of(tensor).numel(); });
}

extern "C" AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes) {
  return guarded(__func__, [&] {
    *require_out(ret_sizes, "ret_sizes") = tensor_of(tensor).sizes.data();
  });
}

extern "C" AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret_size) {
  return guarded(__func__, [&] {
    const Tensor& t = tensor_of(tensor);
    ETM_REQUIRE(d >= 0 && d < t.dim(), "dimension ", d, " out of range for a ", t.dim(), "-dim tensor");
    *require_out(ret_size, "ret_size") = t.sizes[d];
  });
}

extern "C" AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides) {
  return guarded(__func__, [&] {
    *require_out(ret_strides, "ret_strides") = tensor_of(tensor).strides.data();
  });
}

extern "C" AOTITorchError aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d,
                                                int64_t* ret_stride) {
  return guarded(__func__, [&] {
    const Tensor& t = tensor_of(tensor);
    ETM_REQUIRE(d >= 0 && d < t.dim(), "dimension ", d, " out of range for a ", t.dim(), "-dim tensor");
    *require_out(ret_stride, "ret_stride") = t.strides[d];
  });
}

extern "C" AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype) {
  return guarded(__func__, [&] { *require_out(ret_dtype, "ret_dtype") = tensor_of(tensor).dtype; });
}

extern "C" AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor,
                                                     int32_t* ret_device_type) {
  return guarded(__func__, [&] {
    *require_out(ret_device_type, "ret_device_type") = tensor_of(tensor).device_type;
  });
}

extern "C" AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor,
                                                      int32_t* ret_device_index) {
  return guarded(__func__, [&] {
    *require_out(ret_device_index, "ret_device_index") = tensor_of(tensor).device_index;
  });
}

extern "C" AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout) {
  return guarded(__func__, [&] {
    tensor_of(tensor);
    *require_out(ret_layout, "ret_layout") = 0;
  });
}

extern "C" AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle tensor,
                                                        int64_t* ret_storage_offset) {
  return guarded(__func__, [&] {
    *require_out(ret_storage_offset, "ret_storage_offset") = tensor_of(tensor).storage_offset;
  });
}

extern "C" AOTITorchError aoti_torch_is_contiguous(AtenTensorHandle tensor, bool* ret_is_contiguous) {
  return guarded(__func__, [&] {
    *require_out(ret_is_contiguous, "ret_is_contiguous") = tensor_of(tensor).is_contiguous();
  });
}

extern "C" AOTITorchError aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret_is_defined) {
  return guarded(__func__, [&] {
    require_out(ret_is_defined, "ret_is_defined");
    *ret_is_defined = tensor != nullptr && abi::any_tensor_of(tensor).storage != nullptr;
  });
}

extern "C" AOTITorchError aoti_torch_assign_tensors_out(AtenTensorHandle src,
                                                        AtenTensorHandle* ret_dst) {
  return guarded(__func__, [&] {
    require_out(ret_dst, "ret_dst");
    *ret_dst = abi::new_handle(std::make_unique<Tensor>(tensor_of(src)));
  });
}

extern "C" AOTITorchError aoti_torch_assign_tensors(AtenTensorHandle src, AtenTensorHandle dst) {
  return guarded(__func__, [&] {
    const Tensor& source = tensor_of(src);
    Tensor& target = abi::any_tensor_of(dst);  // an undefined dst becomes src's alias
    target = source;
  });
}

namespace {

// Reads the one element of `handle` as `dtype` once the stream's pending work is done.
AOTITorchError read_item(const char* function, AtenTensorHandle handle, DType dtype, void* out) {
  return guarded(function, [&] {
    require_out(out, "ret_value");
    const Tensor& t = tensor_of(handle);
    ETM_REQUIRE(t.numel() == 1, "a tensor with ", t.numel(), " elements has no single value");
    Stream& stream = Runtime::get().current_stream();
    stream.wait_idle();
    stream.wait_for_other_streams(t.storage->buffer);
    convert_elements(t.data(), t.dtype, out, static_cast<int32_t>(dtype), 1);
  });
}

}  // namespace

#define ITEM_GETTER(name, ctype, dtype)                                                  \
  extern "C" AOTITorchError aoti_torch_item_##name(AtenTensorHandle tensor, ctype* ret) { \
    return read_item(__func__, tensor, DType::dtype, ret);                                \
  }
ITEM_GETTER(float16, uint16_t, float16)
ITEM_GETTER(bfloat16, uint16_t, bfloat16)
ETM_ABI_SCALAR_TYPES(ITEM_GETTER)
ITEM_GETTER(complex64, etmetal_complex64, complex64)

extern "C" void aoti_torch_warn(const char* func, const char* file, uint32_t line, const char* msg) {
  try {
    log(LogLevel::warn, concat(func ? func : "?", " (", file ? file : "?", ":", line, "): ",
                               msg ? msg : ""));
  } catch (...) {
    // Logging must never take the caller down.
  }
}

extern "C" void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line,
                                 const char* msg) {
  if (cond) return;
  const std::string where = concat(func ? func : "?", " (", file ? file : "?", ":", line, ")");
  etm::abi::report_failure(where.c_str(), msg ? msg : "check failed", true);
}
