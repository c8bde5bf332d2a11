// Tensors: sizes, strides and a storage offset (in elements) over a shared Storage, which is
// a byte range of a device buffer. Views share the Storage; it lives while any view does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/allocator.h"

namespace etm {

struct Storage {
  BufferPtr buffer;         // null only for an empty storage
  size_t buffer_offset = 0; // bytes from buffer->contents() to the storage's start
  size_t nbytes = 0;
  // Bytes of the allocation from the storage's start on (>= nbytes): how far views may reach.
  size_t capacity = 0;
  unsigned char* data() const {
    return buffer ? static_cast<unsigned char*>(buffer->contents()) + buffer_offset : nullptr;
  }
};

constexpr int32_t kDeviceCpu = 0;
constexpr int32_t kDeviceMps = 13;

class Tensor {
 public:
  std::shared_ptr<Storage> storage;
  int32_t dtype = 6;
  int32_t device_type = kDeviceMps;
  int32_t device_index = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const;
  size_t itemsize() const;
  unsigned char* data() const;
  // Bytes from storage->buffer->contents() to the first element.
  size_t buffer_offset() const {
    return storage->buffer_offset + (storage_offset ? storage_offset * itemsize() : 0);  // per dispatch
  }
  bool is_contiguous() const;
  // Bytes from the first element the sizes and strides can reach to one past the last.
  size_t reach_bytes() const;
};

// Throws unless ndim, sizes and strides describe a valid layout (non-negative sizes,
// non-negative strides, no overflow). Returns the element extent: the storage length in
// elements that the layout needs from offset 0 (0 for an empty tensor).
int64_t checked_extent(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                       int64_t storage_offset);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// Bytes of `extent` elements of `dtype`; throws on overflow or an unsupported dtype.
size_t storage_nbytes(int64_t extent, int32_t dtype);

// Copies src into dst element by element on the host: any strides, src broadcast to dst's
// shape, dtype conversion. Both tensors must be host-addressable and idle.
void copy_elements(const Tensor& dst, const Tensor& src);

}  // namespace etm
