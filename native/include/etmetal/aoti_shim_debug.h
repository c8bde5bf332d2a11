/* The debugging and profiling functions of torch 2.13's C shim (c/shim.h) that AOTInductor
 * emits under its debug options: the inf/NaN check (config.nan_asserts,
 * config.aot_inductor.debug_check_inf_and_nan), the intermediate value printer
 * (config.aot_inductor.debug_intermediate_value_printer = "2"/"3"), and record_function scopes
 * (config.cpp.enable_kernel_profile) with the IValues they take. */
#ifndef ETMETAL_AOTI_SHIM_DEBUG_H
#define ETMETAL_AOTI_SHIM_DEBUG_H

#include "aoti_shim.h"

ETMETAL_BEGIN_DECLS

/* Once the calling thread's stream has finished: fails (returns 1; etmetal_last_error() says
 * "At least one NaN in <tensor_name>" or "At least one INF in <tensor_name>", NaN checked
 * first, as torch does) when the tensor holds one; real and imaginary parts of complex tensors
 * count; integer and bool tensors pass. Does not poison the stream. */
ETMETAL_API AOTITorchError aoti_torch_check_inf_and_nan(const char* tensor_name, AtenTensorHandle tensor);

/* Prints to stdout, once the calling thread's stream has finished, "[  msg  ]:", the values
 * of a tensor of at most 64 elements, then its number of elements, dtype, mean, min and max
 * (not for complex), device, sizes, strides and contiguity. An invalid handle prints a line
 * saying so and sets etmetal_last_error() (the function returns nothing). */
ETMETAL_API void aoti_torch_print_tensor_handle(AtenTensorHandle self, const char* msg);

/* IValues, as record_function scopes take them: an int64, a string, a list of strings or a
 * tensor (a new reference to it). Each handle is freed with
 * aoti_torch_delete_c10_value_object. */
typedef struct C10IValueOpaque* C10IValueHandle;
ETMETAL_API AOTITorchError aoti_torch_int64_to_ivalue(int64_t val, C10IValueHandle* ivalue);
ETMETAL_API AOTITorchError aoti_torch_strlist_to_ivalue(const char** val, int64_t len, C10IValueHandle* ivalue);
ETMETAL_API AOTITorchError aoti_torch_str_to_ivalue(const char* val, C10IValueHandle* ivalue);
ETMETAL_API AOTITorchError aoti_torch_tensor_to_ivalue(AtenTensorHandle val, C10IValueHandle* ivalue);
ETMETAL_API AOTITorchError aoti_torch_delete_c10_value_object(C10IValueHandle handle);

/* A profiling scope named `name`, from start to end: with ETMETAL_TRACE set, a span of
 * category "record_function" on the calling thread's track of the dispatch trace (its args:
 * the number of inputs); without it, nothing is recorded. kwargs (a C++ map the generated code
 * owns) is not read; inputs may be NULL when n_inputs is 0. *guard is ended (and freed) by
 * aoti_record_function_end. */
typedef struct IValueMapOpaque* IValueMapHandle;
typedef struct AtenRecordFunctionOpaque* AtenRecordFunctionHandle;
ETMETAL_API AOTITorchError aoti_record_function_start(const char* name, IValueMapHandle kwargs,
                                                      const C10IValueHandle* inputs, const uint64_t n_inputs,
                                                      AtenRecordFunctionHandle* guard);
ETMETAL_API AOTITorchError aoti_record_function_end(AtenRecordFunctionHandle guard);

ETMETAL_END_DECLS

#endif
