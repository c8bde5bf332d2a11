/* ExecuTorch's Metal buffer and stream functions (backends/apple/metal/runtime), same names
 * and signatures, so an ExecuTorch build can link etmetal in their place. Device pointers are
 * host-addressable; any pointer inside a live allocation resolves to that allocation. */
#ifndef ETMETAL_METAL_BUFFER_H
#define ETMETAL_METAL_BUFFER_H

#include "etmetal_decls.h"

ETMETAL_BEGIN_DECLS

/* Device memory of `bytes` bytes (NULL for 0 or on failure). */
ETMETAL_API void* metal_allocate_buffer(long bytes);
/* Frees memory from metal_allocate_buffer or a metal_buffer_nocopy mapping; NULL is a no-op. */
ETMETAL_API void metal_deallocate_buffer(void* ptr);
/* True when ptr lies inside a live allocation or mapping. */
ETMETAL_API bool metal_is_device_pointer(void* ptr);
/* Waits for the calling thread's stream when either side is device memory, then copies.
 * Returns 0 on success, -1 on failure. */
ETMETAL_API int metal_copy_memory(void* dst, const void* src, size_t nbytes, bool src_is_device,
                                  bool dst_is_device);
/* Waits for all work and releases cached (pooled) device memory. Live allocations stay. */
ETMETAL_API void metal_cleanup_resources(void);
/* Makes caller memory usable as device memory in place. With map_ptr_to_buffer the mapping is
 * registered, so tensors over ptr resolve to it; unmap with metal_deallocate_buffer. Returns
 * false when the device cannot use the memory in place. */
ETMETAL_API bool metal_buffer_nocopy(void* ptr, size_t nbytes, bool map_ptr_to_buffer);
/* Commits the calling thread's stream and waits for it. */
ETMETAL_API void synchronize_metal_stream(void);

ETMETAL_END_DECLS

#endif
