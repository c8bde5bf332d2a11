/* The Metal functions of AOTInductor's C shim (torch/csrc/inductor/aoti_torch/c/shim_mps.h,
 * torch 2.13), same names and signatures.
 *
 * Kernel encoding state (started kernel, bound arguments) belongs to the calling thread's
 * stream, so one kernel handle may be used from several threads at once. A library owns its
 * kernel function handles: they die with it. Dispatch failures inside a model run also
 * poison the stream: the next etmetal_synchronize reports them. */
#ifndef ETMETAL_AOTI_SHIM_MPS_H
#define ETMETAL_AOTI_SHIM_MPS_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

typedef struct AOTIMetalKernelFunctionOpaque* AOTIMetalKernelFunctionHandle;
typedef struct AOTIMetalShaderLibraryOpaque* AOTIMetalShaderLibraryHandle;

/* Compiles MSL source now; a compile error names the MSL lines. Generated model code ignores
 * this call's result, so a failure here (and in get_kernel_function) also poisons the stream:
 * the next waiting synchronize reports the root cause, not a later null-handle error. */
ETMETAL_API AOTITorchError aoti_torch_mps_create_shader_library(
    const char* metal_shader_source, AOTIMetalShaderLibraryHandle* library_handle);
ETMETAL_API AOTITorchError aoti_torch_mps_delete_shader_library(
    AOTIMetalShaderLibraryHandle library_handle);
/* The library's kernel of that name; the same handle for repeated calls. */
ETMETAL_API AOTITorchError aoti_torch_mps_get_kernel_function(
    AOTIMetalShaderLibraryHandle library_handle, const char* kernel_name,
    AOTIMetalKernelFunctionHandle* function_handle);

/* Makes func the calling thread's current kernel and clears its bound arguments. */
ETMETAL_API AOTITorchError aoti_torch_mps_start_encoding(AOTIMetalKernelFunctionHandle func);
/* Binds the tensor's memory at its storage offset to argument idx. A 0-dim host tensor is
 * passed by value (float64 narrowed to float32). */
ETMETAL_API AOTITorchError aoti_torch_mps_set_arg_tensor(AOTIMetalKernelFunctionHandle func,
                                                         unsigned idx, AtenTensorHandle tensor);
/* Binds 8 bytes holding val (MSL: constant long&). */
ETMETAL_API AOTITorchError aoti_torch_mps_set_arg_int(AOTIMetalKernelFunctionHandle func,
                                                      unsigned idx, int64_t val);
/* Grid of `length` threads, threadgroups of min(length, max threads per threadgroup). */
ETMETAL_API AOTITorchError aoti_torch_mps_dispatch_single(AOTIMetalKernelFunctionHandle func,
                                                          uint64_t length);
ETMETAL_API AOTITorchError aoti_torch_mps_dispatch_single_with_group_size(
    AOTIMetalKernelFunctionHandle func, uint64_t length, uint64_t group_size);
/* 1 to 3 grid dimensions; default threadgroup (max threads, 1, 1) clamped to the grid. */
ETMETAL_API AOTITorchError aoti_torch_mps_dispatch_array(AOTIMetalKernelFunctionHandle func,
                                                         const uint64_t* length,
                                                         size_t length_size);
ETMETAL_API AOTITorchError aoti_torch_mps_dispatch_array_with_group_size(
    AOTIMetalKernelFunctionHandle func, const uint64_t* length, size_t length_size,
    const uint64_t* group_size, size_t group_size_size);

/* Device memory the host can address; 0 bytes gives NULL. Free with aoti_torch_mps_free. */
ETMETAL_API AOTITorchError aoti_torch_mps_malloc(void** buffer, size_t num_bytes);
ETMETAL_API AOTITorchError aoti_torch_mps_free(void* ptr);
/* Copies data_size bytes from constants_start + bytes_read to buffer + constant_offset. */
ETMETAL_API AOTITorchError aoti_torch_mps_memcpy(void* buffer, size_t constant_offset,
                                                 size_t bytes_read, size_t data_size,
                                                 uint8_t* constants_start);
/* Device-to-device copy, ordered on the calling thread's stream. */
ETMETAL_API AOTITorchError aoti_torch_mps_copy_buffer(void* src_buffer, void* dst_buffer,
                                                      size_t data_size, size_t src_offset,
                                                      size_t dst_offset);

typedef void (*aoti_torch_mps_command_block_callback_t)(AOTIMetalKernelFunctionHandle func,
                                                        void* user_data);
/* user_data is a std::function<void(AOTIMetalKernelFunctionHandle)>*; calls it with func. */
ETMETAL_API void aoti_torch_mps_shared_callback(AOTIMetalKernelFunctionHandle func,
                                                void* user_data);
/* Calls callback(func, user_data) serialized with other encoding on the calling thread's
 * stream. Neither commits nor waits. */
ETMETAL_API AOTITorchError aoti_torch_mps_run_command_block(
    AOTIMetalKernelFunctionHandle func, aoti_torch_mps_command_block_callback_t callback,
    void* user_data);

ETMETAL_END_DECLS

#endif
