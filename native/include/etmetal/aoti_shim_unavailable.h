/* Functions of torch 2.13's C shim (c/shim.h) that cannot work without libtorch, CUDA or
 * fbgemm. They are exported, with torch's names and signatures, so that a model or extension
 * that names them still loads; each call fails (returns 1), sets etmetal_last_error() to a
 * message naming the function and saying why, and poisons the calling thread's stream. Nothing
 * aborts. tools/abi_coverage.py counts the functions of this header as "exported, fails with
 * a clear error", apart from the implemented ones. */
#ifndef ETMETAL_AOTI_SHIM_UNAVAILABLE_H
#define ETMETAL_AOTI_SHIM_UNAVAILABLE_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* etmetal has no proxy executor for ops without a C shim. The message names the extern node
 * index the op has in the package. */
struct AOTIProxyExecutorOpaque;
ETMETAL_API AOTITorchError aoti_torch_proxy_executor_call_function(
    struct AOTIProxyExecutorOpaque* proxy_executor, int extern_node_index, int num_ints,
    int64_t* flatten_int_args, int num_tensors, AtenTensorHandle* flatten_tensor_args);

/* etmetal has no ATen dispatcher. The message names the op ("opName.overloadName") the caller
 * asked for. */
typedef uint64_t StableIValue;
ETMETAL_API AOTITorchError aoti_torch_call_dispatcher(const char* opName, const char* overloadName,
                                                      StableIValue* stack);

/* Stable-ABI op registration into libtorch's dispatcher (torch::Library), which etmetal does not
 * have; custom ops reach etmetal as C shims (etmetal_py.ops). */
typedef struct TorchLibraryOpaque* TorchLibraryHandle;
ETMETAL_API AOTITorchError aoti_torch_library_init_impl(const char* ns, const char* k, const char* file,
                                                        uint32_t line, TorchLibraryHandle* ret_new_torch_lib);
ETMETAL_API AOTITorchError aoti_torch_library_init_def(const char* ns, const char* file, uint32_t line,
                                                       TorchLibraryHandle* ret_new_torch_lib);
ETMETAL_API AOTITorchError aoti_torch_library_init_fragment(const char* ns, const char* file, uint32_t line,
                                                            TorchLibraryHandle* ret_new_torch_lib);
ETMETAL_API AOTITorchError aoti_torch_library_impl(TorchLibraryHandle self, const char* name,
                                                   void (*fn)(StableIValue*, uint64_t, uint64_t));
ETMETAL_API AOTITorchError aoti_torch_library_def(TorchLibraryHandle self, const char* schema);
ETMETAL_API AOTITorchError aoti_torch_delete_library_object(TorchLibraryHandle tlh);

/* fbgemm's packed fp16 and int8 linear layers of torch's CPU backend (x86 fbgemm kernels and
 * their packed-weight objects). */
ETMETAL_API AOTITorchError aoti_torch_cpu_wrapped_fbgemm_pack_gemm_matrix_fp16(AtenTensorHandle weight,
                                                                               AtenTensorHandle* out);
ETMETAL_API AOTITorchError aoti_torch_cpu__wrapped_linear_prepack(AtenTensorHandle weight,
                                                                  AtenTensorHandle weight_scale,
                                                                  AtenTensorHandle weight_zero_point,
                                                                  AtenTensorHandle bias, AtenTensorHandle* out);
ETMETAL_API AOTITorchError aoti_torch_cpu_wrapped_fbgemm_linear_fp16_weight(AtenTensorHandle input,
                                                                            AtenTensorHandle weight,
                                                                            AtenTensorHandle bias,
                                                                            int64_t out_channel,
                                                                            AtenTensorHandle* out);
ETMETAL_API AOTITorchError aoti_torch_cpu__wrapped_quantized_linear_prepacked(
    AtenTensorHandle input, AtenTensorHandle input_scale, AtenTensorHandle input_zero_point,
    AtenTensorHandle weight, AtenTensorHandle out_scale, AtenTensorHandle out_zeropoint, int64_t out_channel,
    AtenTensorHandle* out);

/* The intermediate value printer's "save" mode (config.aot_inductor.
 * debug_intermediate_value_printer = "1") writes each tensor with torch.save's pickle format,
 * which needs libtorch. Returns nothing: logs the error, naming the tensor, and sets
 * etmetal_last_error() instead of returning 1 (the stream is poisoned as above). */
ETMETAL_API void aoti_torch_save_tensor_handle(AtenTensorHandle self, const char* tensor_name,
                                               const char* launch_prefix, const char* kernel_name);

/* CUDA device and stream guards and CUDA's caching allocator: there is no CUDA device. */
typedef struct CUDAGuardOpaque* CUDAGuardHandle;
typedef struct CUDAStreamGuardOpaque* CUDAStreamGuardHandle;
ETMETAL_API AOTITorchError aoti_torch_create_cuda_guard(int32_t device_index, CUDAGuardHandle* ret_guard);
ETMETAL_API AOTITorchError aoti_torch_delete_cuda_guard(CUDAGuardHandle guard);
ETMETAL_API AOTITorchError aoti_torch_cuda_guard_set_index(CUDAGuardHandle guard, int32_t device_index);
ETMETAL_API AOTITorchError aoti_torch_create_cuda_stream_guard(void* stream, int32_t device_index,
                                                               CUDAStreamGuardHandle* ret_guard);
ETMETAL_API AOTITorchError aoti_torch_delete_cuda_stream_guard(CUDAStreamGuardHandle guard);
ETMETAL_API AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);
ETMETAL_API AOTITorchError aoti_torch_cuda_caching_allocator_raw_alloc(uint64_t nbytes, void** ret_ptr);
ETMETAL_API AOTITorchError aoti_torch_cuda_caching_allocator_raw_delete(void* ptr);

ETMETAL_END_DECLS

#endif
