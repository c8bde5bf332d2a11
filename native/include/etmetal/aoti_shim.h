/* Tensor functions of PyTorch AOTInductor's C shim (torch/csrc/inductor/aoti_torch/c/shim.h,
 * torch 2.13), with the same names and signatures, so generated model code links to them.
 *
 * Lifetimes: a function that returns a tensor handle returns a new reference that the caller
 * frees with aoti_torch_delete_tensor_object. Pointers returned by get_sizes/get_strides/
 * get_data_ptr are borrowed and live as long as the handle (data: as long as its storage). */
#ifndef ETMETAL_AOTI_SHIM_H
#define ETMETAL_AOTI_SHIM_H

#include "etmetal_decls.h"

ETMETAL_BEGIN_DECLS

typedef int32_t AOTITorchError;
typedef struct AtenTensorOpaque* AtenTensorHandle;
/* A torch generator (c_shim_mps.h random ops); etmetal has none to hand out, so only null is valid. */
typedef struct AtenGeneratorOpaque* AtenGeneratorHandle;

ETMETAL_API int32_t aoti_torch_device_type_cpu(void);
ETMETAL_API int32_t aoti_torch_device_type_cuda(void);
ETMETAL_API int32_t aoti_torch_device_type_meta(void);
ETMETAL_API int32_t aoti_torch_device_type_xpu(void);
ETMETAL_API int32_t aoti_torch_device_type_mps(void);
ETMETAL_API int32_t aoti_torch_device_type_privateuse1(void);

ETMETAL_API int32_t aoti_torch_dtype_float8_e5m2(void);
ETMETAL_API int32_t aoti_torch_dtype_float8_e4m3fn(void);
ETMETAL_API int32_t aoti_torch_dtype_float8_e5m2fnuz(void);
ETMETAL_API int32_t aoti_torch_dtype_float8_e4m3fnuz(void);
ETMETAL_API int32_t aoti_torch_dtype_float8_e8m0fnu(void);
ETMETAL_API int32_t aoti_torch_dtype_float4_e2m1fn_x2(void);
ETMETAL_API int32_t aoti_torch_dtype_bfloat16(void);
ETMETAL_API int32_t aoti_torch_dtype_float16(void);
ETMETAL_API int32_t aoti_torch_dtype_float32(void);
ETMETAL_API int32_t aoti_torch_dtype_float64(void);
ETMETAL_API int32_t aoti_torch_dtype_uint8(void);
ETMETAL_API int32_t aoti_torch_dtype_uint16(void);
ETMETAL_API int32_t aoti_torch_dtype_uint32(void);
ETMETAL_API int32_t aoti_torch_dtype_uint64(void);
ETMETAL_API int32_t aoti_torch_dtype_int8(void);
ETMETAL_API int32_t aoti_torch_dtype_int16(void);
ETMETAL_API int32_t aoti_torch_dtype_int32(void);
ETMETAL_API int32_t aoti_torch_dtype_int64(void);
ETMETAL_API int32_t aoti_torch_dtype_bool(void);
ETMETAL_API int32_t aoti_torch_dtype_complex32(void);
ETMETAL_API int32_t aoti_torch_dtype_complex64(void);
ETMETAL_API int32_t aoti_torch_dtype_complex128(void);
/* Bytes per element; 0 for an unknown dtype (and etmetal_last_error() says so). */
ETMETAL_API size_t aoti_torch_dtype_element_size(int32_t dtype);

ETMETAL_API int32_t aoti_torch_layout_strided(void);
/* The other c10::Layout codes (1 to 7, torch's enum order). etmetal's tensors are all strided;
 * these exist for code that compares layouts. */
ETMETAL_API int32_t aoti_torch_layout_sparse_coo(void);
ETMETAL_API int32_t aoti_torch_layout_sparse_csr(void);
ETMETAL_API int32_t aoti_torch_layout__mkldnn(void);
ETMETAL_API int32_t aoti_torch_layout_sparse_csc(void);
ETMETAL_API int32_t aoti_torch_layout_sparse_bsr(void);
ETMETAL_API int32_t aoti_torch_layout_sparse_bsc(void);
ETMETAL_API int32_t aoti_torch_layout_jagged(void);

/* TORCH_ABI_VERSION of the torch whose C shim this library implements (2.13.0):
 * major << 56 | minor << 48 | patch << 40 | ABI tag. */
ETMETAL_API uint64_t aoti_torch_abi_version(void);

ETMETAL_API bool aoti_torch_grad_mode_is_enabled(void);
ETMETAL_API void aoti_torch_grad_mode_set_enabled(bool enabled);

/* A new tensor with fresh storage. device_type cpu (0) gives host memory, mps (13) device
 * memory; the storage holds exactly what the sizes and strides reach. */
ETMETAL_API AOTITorchError aoti_torch_empty_strided(
    int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr, int32_t dtype,
    int32_t device_type, int32_t device_index, AtenTensorHandle* ret_new_tensor);

/* empty_strided with pinned host memory: device_type must be cpu (0), as torch requires.
 * Every host allocation here is already memory the device reads in place (unified memory, or
 * the CPU device itself), so this is aoti_torch_empty_strided on the cpu device. */
ETMETAL_API AOTITorchError aoti_torch_empty_strided_pinned(
    int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr, int32_t dtype,
    int32_t device_type, int32_t device_index, AtenTensorHandle* ret_new_tensor);

/* A tensor over memory the caller keeps alive. A pointer anywhere inside a live etmetal
 * allocation shares that allocation; other memory is wrapped in place. The tensor's first
 * element is at data + storage_offset elements. */
ETMETAL_API AOTITorchError aoti_torch_create_tensor_from_blob(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret);
/* As above; layout must be strided and opaque metadata is not supported. */
ETMETAL_API AOTITorchError aoti_torch_create_tensor_from_blob_v2(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret, int32_t layout, const uint8_t* opaque_metadata,
    int64_t opaque_metadata_size);

/* A view of self's storage with new sizes and strides, its storage offset advanced by
 * storage_offset elements. */
ETMETAL_API AOTITorchError aoti_torch__reinterpret_tensor(
    AtenTensorHandle self, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, AtenTensorHandle* ret_new_tensor);

ETMETAL_API AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
/* A second handle to the same tensor (same storage, sizes, strides, offset). */
ETMETAL_API AOTITorchError aoti_torch_new_tensor_handle(AtenTensorHandle orig_handle,
                                                        AtenTensorHandle* new_handle);

/* Contiguous copy. */
ETMETAL_API AOTITorchError aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret);
/* Copy with the same strides and a storage of the same extent. */
ETMETAL_API AOTITorchError aoti_torch_clone_preserve_strides(AtenTensorHandle self,
                                                             AtenTensorHandle* ret);
/* self <- src, element by element: any strides, src broadcast to self's shape, conversion
 * between any two supported dtypes. Ordered after work already encoded on the calling
 * thread's stream. */
ETMETAL_API AOTITorchError aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src,
                                            int32_t non_blocking);

/* dst <- src (torch's dst.copy_(src)); as aoti_torch_copy_(dst, src, 0). */
ETMETAL_API AOTITorchError aoti_torch_tensor_copy_(AtenTensorHandle src, AtenTensorHandle dst);

/* out = a @ b + c @ d (2-D float32, float16 or bfloat16 mps tensors, out [M, N]): torch's
 * mm_out(out, a, b) then out.addmm_(c, d). */
ETMETAL_API AOTITorchError aoti_torch__mm_plus_mm_out(AtenTensorHandle out, AtenTensorHandle a,
                                                      AtenTensorHandle b, AtenTensorHandle c,
                                                      AtenTensorHandle d);

ETMETAL_API AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret_data_ptr);
ETMETAL_API AOTITorchError aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret_size);
ETMETAL_API AOTITorchError aoti_torch_get_storage_numel(AtenTensorHandle tensor,
                                                        int64_t* ret_numel);
ETMETAL_API AOTITorchError aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim);
ETMETAL_API AOTITorchError aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret_numel);
ETMETAL_API AOTITorchError aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret_sizes);
ETMETAL_API AOTITorchError aoti_torch_get_size(AtenTensorHandle tensor, int64_t d,
                                               int64_t* ret_size);
ETMETAL_API AOTITorchError aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret_strides);
ETMETAL_API AOTITorchError aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d,
                                                 int64_t* ret_stride);
ETMETAL_API AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype);
ETMETAL_API AOTITorchError aoti_torch_get_device_type(AtenTensorHandle tensor,
                                                      int32_t* ret_device_type);
ETMETAL_API AOTITorchError aoti_torch_get_device_index(AtenTensorHandle tensor,
                                                       int32_t* ret_device_index);
ETMETAL_API AOTITorchError aoti_torch_get_layout(AtenTensorHandle tensor, int32_t* ret_layout);
ETMETAL_API AOTITorchError aoti_torch_get_storage_offset(AtenTensorHandle tensor,
                                                         int64_t* ret_storage_offset);
ETMETAL_API AOTITorchError aoti_torch_is_contiguous(AtenTensorHandle tensor,
                                                    bool* ret_is_contiguous);
ETMETAL_API AOTITorchError aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret_is_defined);

/* A second handle aliasing src (same storage and layout), as aoti_torch_new_tensor_handle. */
ETMETAL_API AOTITorchError aoti_torch_assign_tensors_out(AtenTensorHandle src,
                                                         AtenTensorHandle* ret_dst);
/* Makes dst an alias of src (storage, sizes, strides, offset, dtype); both stay separate handles. */
ETMETAL_API AOTITorchError aoti_torch_assign_tensors(AtenTensorHandle src, AtenTensorHandle dst);

/* The value of a one-element tensor, converted to the requested type, after the calling
 * thread's stream has finished. float16 and bfloat16 come back as their 16 bits (c10::Half and
 * c10::BFloat16 hold exactly those). */
ETMETAL_API AOTITorchError aoti_torch_item_float16(AtenTensorHandle tensor, uint16_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_bfloat16(AtenTensorHandle tensor, uint16_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_float32(AtenTensorHandle tensor, float* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_float64(AtenTensorHandle tensor, double* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_uint8(AtenTensorHandle tensor, uint8_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_uint16(AtenTensorHandle tensor, uint16_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_uint32(AtenTensorHandle tensor, uint32_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_uint64(AtenTensorHandle tensor, uint64_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_int8(AtenTensorHandle tensor, int8_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_int16(AtenTensorHandle tensor, int16_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_int32(AtenTensorHandle tensor, int32_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_int64(AtenTensorHandle tensor, int64_t* ret_value);
ETMETAL_API AOTITorchError aoti_torch_item_bool(AtenTensorHandle tensor, bool* ret_value);

/* c10::complex<float> and c10::complex<double>: real part, then imaginary part. c10 aligns them
 * to 8 and 16 bytes, these structs to 4 and 8; passed by value the two travel alike (x86-64
 * System V: one or two SSE eightbytes, in xmm registers; AAPCS64: a homogeneous floating-point
 * aggregate, in s/d registers), and through a pointer only the layout matters. */
typedef struct etmetal_complex64 {
  float real;
  float imag;
} etmetal_complex64;
typedef struct etmetal_complex128 {
  double real;
  double imag;
} etmetal_complex128;
ETMETAL_API AOTITorchError aoti_torch_item_complex64(AtenTensorHandle tensor, etmetal_complex64* ret_value);

/* Logs msg as a warning, naming the caller. */
ETMETAL_API void aoti_torch_warn(const char* func, const char* file, uint32_t line,
                                 const char* msg);
/* When cond is false, records msg as the thread's error and poisons the calling thread's
 * stream, so the next synchronize fails with it. Never aborts. */
ETMETAL_API void aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line,
                                  const char* msg);

/* c10::MemoryFormat codes. */
ETMETAL_API int32_t aoti_torch_memory_format_contiguous_format(void);
ETMETAL_API int32_t aoti_torch_memory_format_channels_last(void);
ETMETAL_API int32_t aoti_torch_memory_format_channels_last_3d(void);
ETMETAL_API int32_t aoti_torch_memory_format_preserve_format(void);

/* A new 0-dim CPU tensor holding value (torch's at::scalar_to_tensor). */
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_float32(float value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_float64(double value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_uint8(uint8_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_uint16(uint16_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_uint32(uint32_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_uint64(uint64_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_int8(int8_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_int16(int16_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_int32(int32_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_int64(int64_t value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_bool(bool value, AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_complex64(etmetal_complex64 value,
                                                                 AtenTensorHandle* ret_new_tensor);
ETMETAL_API AOTITorchError aoti_torch_scalar_to_tensor_complex128(etmetal_complex128 value,
                                                                  AtenTensorHandle* ret_new_tensor);

/* A view of self's storage with self's number of dimensions, the given sizes and strides
 * (non-negative), starting at self's storage offset; it must stay inside the storage. */
ETMETAL_API AOTITorchError aoti_torch_as_strided(AtenTensorHandle self, const int64_t* sizes_ptr,
                                                 const int64_t* strides_ptr, AtenTensorHandle* ret);
/* Fills self (any strides) with zeros, in stream order. */
ETMETAL_API AOTITorchError aoti_torch_zero_(AtenTensorHandle self);

/* torch's at::Tensor(): a handle to no tensor. aoti_torch_is_defined gives false for it,
 * aoti_torch_assign_tensors may make it an alias of a tensor; every other use fails. */
ETMETAL_API AOTITorchError aoti_torch_new_uninitialized_tensor(AtenTensorHandle* ret);

/* torch's _alloc_from_pool: a view of self's storage (self's storage offset must be 0) from
 * byte offset_bytes (a multiple of dtype's size) on, with dtype, ndim sizes and strides
 * (NULL: contiguous); it must stay inside the allocation. */
ETMETAL_API AOTITorchError aoti_torch__alloc_from_pool(AtenTensorHandle self, int64_t offset_bytes,
                                                       int32_t dtype, int64_t ndim, const int64_t* sizes_ptr,
                                                       const int64_t* strides_ptr,
                                                       AtenTensorHandle* ret_new_tensor);

/* Device-generic guards and streams. etmetal has one device: device_index 0, or -1 for the
 * current one (always 0); any other index fails. A stream handle names the calling thread's
 * stream: its id is the same for every handle of that stream while the thread lives. */
typedef struct DeviceGuardOpaque* DeviceGuardHandle;
typedef struct StreamOpaque* StreamHandle;
ETMETAL_API AOTITorchError aoti_torch_create_device_guard(int32_t device_index, DeviceGuardHandle* ret_guard);
ETMETAL_API AOTITorchError aoti_torch_delete_device_guard(DeviceGuardHandle guard);
ETMETAL_API AOTITorchError aoti_torch_device_guard_set_index(DeviceGuardHandle guard, int32_t device_index);
ETMETAL_API AOTITorchError aoti_torch_get_current_device_index(int32_t* ret_device_index);
ETMETAL_API AOTITorchError aoti_torch_get_current_stream(int32_t device_index, StreamHandle* ret_stream);
ETMETAL_API AOTITorchError aoti_torch_stream_id(StreamHandle stream, int64_t* ret_stream_id);
ETMETAL_API AOTITorchError aoti_torch_delete_stream(StreamHandle stream);

ETMETAL_END_DECLS

#endif
