// Device memory for tensors and raw allocations: a size-bucketed pool of device buffers,
// and the address map that resolves any pointer inside a live allocation to its buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "device/device.h"

namespace etm {

using BufferPtr = std::shared_ptr<device::Buffer>;

struct BufferLocation {
  BufferPtr buffer;
  size_t offset = 0;     // bytes from buffer->contents() to the pointer
  size_t available = 0;  // bytes from the pointer to the end of the allocation
};

// Pointer -> (buffer, offset) by interval lookup. Entries either own their buffer (explicit
// allocations freed by pointer) or observe it (tensor storage, freed with its last user).
// An entry spans the bytes that were asked for, not the device's rounded-up length: a range
// past what the caller allocated is an error even where the page would hold it.
class AddressMap {
 public:
  void add_observed(const BufferPtr& buffer, size_t length);
  // A reference to `buffer` whose last copy removes the buffer's entry from this map.
  BufferPtr removing_on_release(BufferPtr buffer);
  void add_owned(BufferPtr buffer, size_t length);
  void remove(const void* base);
  // The allocation whose [contents, contents + length) holds `pointer`, or a null buffer.
  BufferLocation find(const void* pointer) const;
  // Whether any live allocation shares a byte with [pointer, pointer + length).
  bool overlaps(const void* pointer, size_t length) const;
  // Gives up ownership of the owned entry that starts exactly at `base` and returns its
  // buffer (null when there is none). While tensors still use the buffer, the entry stays
  // to resolve their pointers.
  BufferPtr release_owned(const void* base);

 private:
  struct Entry {
    size_t length;
    std::weak_ptr<device::Buffer> observed;
    BufferPtr owned;
  };
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Entry> entries_;
};

struct AllocatorStats {
  int64_t live_bytes = 0;
  int64_t live_allocations = 0;
  int64_t pooled_bytes = 0;
};

// Hands out buffers whose last reference returns them to a pool instead of the device. A
// command buffer retains what it binds, so memory is reused only after the device is done
// with it. Every allocation is entered in the address map while it is live.
class Allocator {
 public:
  // pool_limit_bytes: cached memory beyond this is returned to the device.
  Allocator(device::Device& device, AddressMap& addresses, size_t pool_limit_bytes);
  ~Allocator();

  // At least `bytes` bytes (bytes > 0). Throws etm::Error when the device is out of memory.
  BufferPtr allocate(size_t bytes);
  void release_cached();
  AllocatorStats stats() const;

 private:
  void recycle(BufferPtr buffer, size_t bytes);

  device::Device& device_;
  AddressMap& addresses_;
  const size_t pool_limit_;
  mutable std::mutex mutex_;
  std::multimap<size_t, BufferPtr> pool_;
  AllocatorStats stats_;
  // Recycling from a buffer's deleter must not touch a destroyed allocator.
  std::shared_ptr<Allocator*> alive_;
};

}  // namespace etm
