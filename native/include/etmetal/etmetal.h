/* libetmetal: the runtime for AOTInductor models compiled for Apple GPUs (device "mps").
 * Includes the whole public API. */
#ifndef ETMETAL_H
#define ETMETAL_H

#include "aoti_shim.h"
#include "aoti_shim_mps.h"
#include "custom_ops.h"
#include "fallback_attention.h"
#include "fallback_blas.h"
#include "fallback_convolution.h"
#include "fallback_experts.h"
#include "fallback_factories.h"
#include "fallback_geometry.h"
#include "fallback_linear_algebra.h"
#include "fallback_matmul.h"
#include "fallback_pointwise.h"
#include "fallback_pooling3d.h"
#include "fallback_quantized.h"
#include "fallback_random.h"
#include "fallback_reductions.h"
#include "fallback_resize.h"
#include "fallback_shape.h"
#include "metal_buffer.h"
#include "fallback_spectral.h"

ETMETAL_BEGIN_DECLS

/* How etmetal_synchronize treats the calling thread's stream (ExecuTorch's SyncType). */
typedef enum etmetal_sync_type {
  /* Nothing: encoded work stays pending. */
  ETMETAL_SYNC_NONE = 0,
  /* Submit pending work; do not wait. */
  ETMETAL_SYNC_COMMIT = 1,
  /* Submit pending work and wait for everything submitted; reports the sticky error. */
  ETMETAL_SYNC_COMMIT_AND_WAIT = 2,
  /* Submit pending work and open a fresh command buffer at once, so the device starts while
   * the host keeps encoding. */
  ETMETAL_SYNC_COMMIT_AND_CONTINUE = 3,
  /* Submit only when the commit policy's limits (dispatches or megabytes) are reached. */
  ETMETAL_SYNC_COMMIT_ADAPTIVE = 4
} etmetal_sync_type;

/* Applies sync_type to the calling thread's stream. Fails, and clears the error, when the
 * stream holds a sticky error (a failed command buffer or a failed call during encoding). */
ETMETAL_API AOTITorchError etmetal_synchronize(int32_t sync_type);

/* Waits until no submitted work uses the tensor's memory: commits and waits for the calling
 * thread's stream, and waits for other threads' committed work on that memory. Leaves sticky
 * errors for etmetal_synchronize. Call it before freeing memory a tensor wraps in place. */
ETMETAL_API AOTITorchError etmetal_tensor_wait(AtenTensorHandle tensor);

/* As aoti_torch_create_tensor_from_blob, for callers that copy when the device cannot use
 * `data` in place (the CPU device uses only etmetal allocations in place, Metal also
 * page-aligned memory): then it succeeds with *ret = NULL, records no error and logs nothing.
 * Other problems (bad dtype, layout or device, memory overlapping an allocation it does not
 * start in) fail as there. */
ETMETAL_API AOTITorchError etmetal_tensor_from_blob_in_place(
    void* data, int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
    int64_t storage_offset, int32_t dtype, int32_t device_type, int32_t device_index,
    AtenTensorHandle* ret);

/* Why the calling thread's most recent failed call failed: "<function>: <reason>"; "" while
 * none has. Successful calls leave it alone (a caller reads it after the failing call even when
 * destructors made successful calls in between). A failure that an earlier encoding call
 * recorded and etmetal_synchronize reports keeps that call's name. Valid until the thread's
 * next failure. */
ETMETAL_API const char* etmetal_last_error(void);
/* Human-readable name of the device, e.g. "Apple M2 Pro" or "CPU (x86_64, 2 threads)". */
ETMETAL_API const char* etmetal_device_name(void);
/* "metal" or "cpu": the device chosen by ETMETAL_DEVICE, else Metal where it exists. */
ETMETAL_API const char* etmetal_device_kind(void);
ETMETAL_API const char* etmetal_version(void);
/* The ETMETAL_* settings in effect, one line each ("NAME=value" or "NAME unset (default:
 * ...)", "INVALID: ..." after a value the variable does not accept, then the accepted values).
 * Valid until the thread's next call. */
ETMETAL_API const char* etmetal_configuration(void);

typedef struct etmetal_allocator_stats_t {
  int64_t live_bytes;       /* bytes of device memory held by live allocations */
  int64_t live_allocations; /* count of those allocations */
  int64_t pooled_bytes;     /* freed device memory cached for reuse */
} etmetal_allocator_stats_t;
ETMETAL_API AOTITorchError etmetal_allocator_stats(etmetal_allocator_stats_t* stats);

typedef struct etmetal_stream_stats_t {
  int64_t pending_commands;     /* dispatches and copies in the open command buffer */
  int64_t pending_bytes;        /* distinct buffer bytes bound in the open command buffer */
  int64_t committed_buffers;    /* command buffers submitted so far */
  int64_t completed_buffers;    /* of those, finished */
  int64_t max_ops_per_buffer;   /* commit policy in force */
  int64_t max_mb_per_buffer;
} etmetal_stream_stats_t;
/* Counters of the calling thread's stream. */
ETMETAL_API AOTITorchError etmetal_stream_stats(etmetal_stream_stats_t* stats);

/* Device-memory traffic of kernel dispatches (the CPU device, when ETMETAL_COUNTERS=1 is in
 * the environment before the process starts: kernels are then compiled with exact, per-access
 * counting, and run slower). Bytes count loads and stores of buffers bound with set_buffer
 * (setBytes data and threadgroup memory are not device memory); an atomic read-modify-write
 * counts its size once read and once written.
 *
 * etmetal_counters_begin opens a counting window: every dispatch executed from then on, by any
 * stream, is recorded in execution order. Only one window is open at a time. */
ETMETAL_API AOTITorchError etmetal_counters_begin(void);

/* Submits and waits for the calling thread's stream (so all it encoded is counted), closes
 * the window and stores its records, replacing those of the previous window; *count receives
 * how many there are. Fails when no window is open or the device cannot count. */
ETMETAL_API AOTITorchError etmetal_counters_end(int64_t* count);

typedef struct etmetal_dispatch_counters_t {
  const char* kernel;    /* kernel name; valid until the next etmetal_counters_end */
  int64_t threads;       /* threads launched (the dispatch's grid) */
  int64_t threadgroups;  /* threadgroups launched, edge groups included */
  int64_t bytes_read;    /* device-memory bytes loaded */
  int64_t bytes_written; /* device-memory bytes stored */
} etmetal_dispatch_counters_t;

/* Copies record `index` (0 <= index < the count etmetal_counters_end gave). */
ETMETAL_API AOTITorchError etmetal_counters_read(int64_t index, etmetal_dispatch_counters_t* record);

/* A function constant value (MSL `[[function_constant(n)]]`, Metal's MTLFunctionConstantValues):
 * the constant named `name`, or when `name` is NULL the one at `index`. `kind` says which value
 * field holds it; the device converts it to the constant's declared type: bool takes
 * ETMETAL_CONSTANT_BOOL (int_value 0 or 1), integer types take ETMETAL_CONSTANT_INT within
 * their range, float/half/bfloat take ETMETAL_CONSTANT_INT or ETMETAL_CONSTANT_FLOAT. */
typedef enum etmetal_constant_kind {
  ETMETAL_CONSTANT_BOOL = 0,
  ETMETAL_CONSTANT_INT = 1,
  ETMETAL_CONSTANT_FLOAT = 2
} etmetal_constant_kind;
typedef struct etmetal_function_constant_t {
  const char* name;
  uint32_t index;
  int32_t kind; /* etmetal_constant_kind */
  int64_t int_value;
  double float_value;
} etmetal_function_constant_t;
/* The library's kernel specialised with `count` constant values (constants without one are
 * undefined). Kernels with different values are different pipelines; the same kernel and values
 * (given the same way: by index or by name) give the same handle, which dies with the library. Fails on an unknown constant or a value its
 * type cannot hold. */
ETMETAL_API AOTITorchError etmetal_get_kernel_function_with_constants(
    AOTIMetalShaderLibraryHandle library_handle, const char* kernel_name,
    const etmetal_function_constant_t* constants, size_t count,
    AOTIMetalKernelFunctionHandle* function_handle);

ETMETAL_END_DECLS

#endif
