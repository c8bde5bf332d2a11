// ExecuTorch's metal_* buffer and stream functions (etmetal/metal_buffer.h).
#include <cstring>

#include "abi/guard.h"
#include "etmetal/metal_buffer.h"

using namespace etm;
using etm::abi::guarded;

extern "C" void* metal_allocate_buffer(long bytes) {
  void* contents = nullptr;
  guarded(__func__, [&] {
    ETM_REQUIRE(bytes >= 0, "negative size ", bytes);
    contents = Runtime::get().allocate_raw(static_cast<size_t>(bytes));
  });
  return contents;
}

extern "C" void metal_deallocate_buffer(void* ptr) {
  guarded(__func__, [&] {
    if (!ptr) return;
    ETM_REQUIRE(Runtime::get().release_raw(ptr), "pointer ", ptr,
                " is not an allocation or mapping of metal_allocate_buffer / metal_buffer_nocopy");
  });
}

extern "C" bool metal_is_device_pointer(void* ptr) {
  bool found = false;
  guarded(__func__, [&] { found = ptr && Runtime::get().addresses().find(ptr).buffer != nullptr; });
  return found;
}

extern "C" int metal_copy_memory(void* dst, const void* src, size_t nbytes, bool src_is_device,
                                 bool dst_is_device) {
  const AOTITorchError status = guarded(__func__, [&] {
    if (nbytes == 0) return;
    ETM_REQUIRE(dst && src, "null pointer");
    Runtime& runtime = Runtime::get();
    for (auto [pointer, is_device, name] :
         {std::tuple{static_cast<const void*>(src), src_is_device, "source"},
          std::tuple{static_cast<const void*>(dst), dst_is_device, "destination"}}) {
      if (!is_device) continue;
      const BufferLocation location = runtime.addresses().find(pointer);
      ETM_REQUIRE(location.buffer, name, " ", pointer, " is not device memory");
      ETM_REQUIRE(nbytes <= location.available, "copy of ", nbytes,
                  " bytes runs past the end of the ", name, " allocation (", location.available,
                  " bytes left)");
    }
    // Device memory is host-addressable; wait until the device is done with it.
    if (src_is_device || dst_is_device) runtime.current_stream().wait_idle();
    std::memmove(dst, src, nbytes);
  });
  return status == 0 ? 0 : -1;
}

extern "C" void metal_cleanup_resources(void) {
  guarded(__func__, [&] {
    Runtime& runtime = Runtime::get();
    runtime.current_stream().wait_idle();
    runtime.allocator().release_cached();
  });
}

extern "C" bool metal_buffer_nocopy(void* ptr, size_t nbytes, bool map_ptr_to_buffer) {
  bool usable = false;
  guarded(__func__, [&] {
    ETM_REQUIRE(ptr, "ptr is null");
    ETM_REQUIRE(nbytes > 0, "cannot map 0 bytes");
    ETM_REQUIRE(reinterpret_cast<uintptr_t>(ptr) <= UINTPTR_MAX - nbytes, "a range of ", nbytes,
                " bytes at ", ptr, " wraps around the address space");
    Runtime& runtime = Runtime::get();
    const BufferLocation existing = runtime.addresses().find(ptr);
    if (existing.buffer) {
      ETM_REQUIRE(nbytes <= existing.available, "range of ", nbytes,
                  " bytes runs past the end of the allocation it starts in (", existing.available,
                  " bytes left)");
      usable = true;
      return;
    }
    ETM_REQUIRE(!runtime.addresses().overlaps(ptr, nbytes), "range of ", nbytes, " bytes at ",
                ptr, " overlaps a device allocation it does not start in");
    BufferPtr wrapped;
    const device::Status status = runtime.device().new_buffer_no_copy(ptr, nbytes, &wrapped);
    ETM_REQUIRE(status.ok(), status.message());
    if (!wrapped) return;  // the device cannot use this memory in place
    if (map_ptr_to_buffer)
      runtime.addresses().add_owned(runtime.addresses().removing_on_release(std::move(wrapped)),
                                    nbytes);
    usable = true;
  });
  return usable;
}

extern "C" void synchronize_metal_stream(void) {
  guarded(__func__, [&] { Runtime::get().current_stream().synchronize(SyncType::commit_and_wait); });
}
