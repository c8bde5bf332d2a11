#include "ops/resize.h"

#include "ops/op_support.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// c10::MemoryFormat codes.
constexpr int32_t kContiguousFormat = 0;
constexpr int32_t kPreserveFormat = 1;
constexpr int32_t kChannelsLast = 2;
constexpr int32_t kChannelsLast3d = 3;

const char* format_name(int32_t format) {
  switch (format) {
    case kContiguousFormat: return "Contiguous";
    case kPreserveFormat: return "Preserve";
    case kChannelsLast: return "ChannelsLast";
    case kChannelsLast3d: return "ChannelsLast3d";
    default: return "unknown";
  }
}

// Channels-last strides of a 4-D or 5-D shape: the channel dimension (1) varies fastest.
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  strides[1] = stride;
  stride *= std::max<int64_t>(sizes[1], 1);
  for (size_t d = sizes.size() - 1; d >= 2; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  strides[0] = stride;
  return strides;
}

std::vector<int64_t> strides_for(const std::vector<int64_t>& sizes, int32_t format) {
  if (format == kChannelsLast) {
    ETM_REQUIRE(sizes.size() == 4, "resize_: required rank 4 tensor to use channels_last format");
    return channels_last_strides(sizes);
  }
  if (format == kChannelsLast3d) {
    ETM_REQUIRE(sizes.size() == 5, "resize_: required rank 5 tensor to use channels_last_3d format");
    return channels_last_strides(sizes);
  }
  ETM_REQUIRE(format == kContiguousFormat, "resize_: Unsupported memory format", format_name(format));
  return contiguous_strides(sizes);
}

// The layout torch's suggest_memory_format names for t.
int32_t suggested_format(const Tensor& t) {
  if ((t.dim() == 4 || t.dim() == 5) && !t.is_contiguous() && t.strides == channels_last_strides(t.sizes)) {
    return t.dim() == 4 ? kChannelsLast : kChannelsLast3d;
  }
  return kContiguousFormat;
}

}  // namespace

void resize(Tensor& self, const std::vector<int64_t>& sizes, std::optional<int32_t> memory_format) {
  for (int64_t s : sizes) ETM_REQUIRE(s >= 0, "resize_: Trying to create tensor with negative dimension ", s, ": ",
                                      shape_text(sizes));
  std::vector<int64_t> strides = strides_for(sizes, memory_format.value_or(kContiguousFormat));
  const int64_t extent = checked_extent(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                                        self.storage_offset);
  const size_t needed = extent == 0 ? 0 : storage_nbytes(extent, self.dtype);
  if (needed > self.storage->nbytes) {
    Runtime& runtime = Runtime::get();
    std::shared_ptr<Storage> grown = runtime.new_storage(needed);
    const Storage& old = *self.storage;
    if (old.nbytes > 0) {
      runtime.current_stream().copy_buffer(old.buffer, old.buffer_offset, grown->buffer, grown->buffer_offset,
                                           old.nbytes);
    }
    *self.storage = *grown;  // every view of the storage sees the new allocation, as in torch
  }
  self.sizes = sizes;
  self.strides = std::move(strides);
}

void resize_as(Tensor& self, const Tensor& the_template, std::optional<int32_t> memory_format) {
  std::optional<int32_t> format = memory_format;
  if (format && *format == kPreserveFormat) format = suggested_format(the_template);
  resize(self, the_template.sizes, format);
}

void set_source(Tensor& self, const Tensor& source) {
  ETM_REQUIRE(self.dtype == source.dtype, "set_: Could not set tensor of type ", dtype_name(source.dtype),
              " to a tensor of type ", dtype_name(self.dtype));
  require_mps("set_", "source", source);
  self.storage = source.storage;
  self.sizes = source.sizes;
  self.strides = source.strides;
  self.storage_offset = source.storage_offset;
}

}  // namespace etm::ops
