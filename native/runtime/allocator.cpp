#include "runtime/allocator.h"

#include "runtime/error.h"

namespace etm {
namespace {

constexpr size_t kPageSize = 16384;  // Apple silicon's page size; a multiple of 4 KiB

size_t round_to_page(size_t bytes) {
  ETM_REQUIRE(bytes <= SIZE_MAX - kPageSize, "allocation of ", bytes, " bytes overflows");
  return (bytes + kPageSize - 1) / kPageSize * kPageSize;
}

}  // namespace

void AddressMap::add_observed(const BufferPtr& buffer, size_t length) {
  std::unique_lock lock(mutex_);
  entries_[reinterpret_cast<uintptr_t>(buffer->contents())] = Entry{length, buffer, {}};
}

BufferPtr AddressMap::removing_on_release(BufferPtr buffer) {
  device::Buffer* raw = buffer.get();
  return BufferPtr(raw, [this, buffer = std::move(buffer)](device::Buffer*) { remove(buffer->contents()); });
}

void AddressMap::add_owned(BufferPtr buffer, size_t length) {
  std::unique_lock lock(mutex_);
  const auto base = reinterpret_cast<uintptr_t>(buffer->contents());
  entries_[base] = Entry{length, {}, std::move(buffer)};
}

void AddressMap::remove(const void* base) {
  std::unique_lock lock(mutex_);
  entries_.erase(reinterpret_cast<uintptr_t>(base));
}

BufferLocation AddressMap::find(const void* pointer) const {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  std::shared_lock lock(mutex_);
  auto it = entries_.upper_bound(address);
  if (it == entries_.begin()) return {};
  --it;
  if (address - it->first >= it->second.length) return {};
  BufferPtr buffer = it->second.owned ? it->second.owned : it->second.observed.lock();
  if (!buffer) return {};
  const size_t offset = address - it->first;
  return {std::move(buffer), offset, it->second.length - offset};
}

bool AddressMap::overlaps(const void* pointer, size_t length) const {
  if (length == 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(pointer);
  const uintptr_t last = begin + (length - 1);
  std::shared_lock lock(mutex_);
  auto it = entries_.upper_bound(last);  // the first entry starting past the range
  if (it == entries_.begin()) return false;
  --it;  // the last entry starting inside or before the range
  return it->first >= begin || begin - it->first < it->second.length;
}

BufferPtr AddressMap::release_owned(const void* base) {
  std::unique_lock lock(mutex_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
  if (it == entries_.end() || !it->second.owned) return nullptr;
  BufferPtr buffer = std::move(it->second.owned);
  if (buffer.use_count() == 1)
    entries_.erase(it);
  else
    it->second.observed = buffer;
  return buffer;
}

Allocator::Allocator(device::Device& device, AddressMap& addresses, size_t pool_limit_bytes)
    : device_(device),
      addresses_(addresses),
      pool_limit_(pool_limit_bytes),
      alive_(std::make_shared<Allocator*>(this)) {}

Allocator::~Allocator() {
  std::lock_guard lock(mutex_);
  *alive_ = nullptr;
}

BufferPtr Allocator::allocate(size_t bytes) {
  ETM_REQUIRE(bytes > 0, "cannot allocate 0 bytes");
  const size_t rounded = round_to_page(bytes);
  BufferPtr raw;
  {
    std::lock_guard lock(mutex_);
    // Reuse a cached buffer that is big enough but not wastefully so.
    auto it = pool_.lower_bound(rounded);
    if (it != pool_.end() && it->first <= rounded * 2) {
      raw = std::move(it->second);
      stats_.pooled_bytes -= static_cast<int64_t>(it->first);
      pool_.erase(it);
    }
  }
  if (!raw) {
    device::Status status = device_.new_buffer(rounded, &raw);
    if (!status.ok() || !raw) {
      release_cached();
      status = device_.new_buffer(rounded, &raw);
    }
    ETM_REQUIRE(status.ok() && raw, "out of device memory allocating ", bytes, " bytes: ",
                status.message());
  }
  const size_t length = raw->length();
  {
    std::lock_guard lock(mutex_);
    stats_.live_bytes += static_cast<int64_t>(length);
    stats_.live_allocations += 1;
  }
  std::weak_ptr<Allocator*> alive = alive_;
  AddressMap* addresses = &addresses_;
  device::Buffer* raw_pointer = raw.get();
  BufferPtr handed(raw_pointer, [alive, addresses, raw = std::move(raw), length](device::Buffer*) mutable {
    addresses->remove(raw->contents());
    if (auto owner = alive.lock(); owner && *owner) (*owner)->recycle(std::move(raw), length);
  });
  addresses_.add_observed(handed, bytes);
  return handed;
}

void Allocator::recycle(BufferPtr buffer, size_t bytes) {
  std::lock_guard lock(mutex_);
  stats_.live_bytes -= static_cast<int64_t>(bytes);
  stats_.live_allocations -= 1;
  if (bytes > pool_limit_) return;
  // Make room by dropping the largest cached buffers first: they are the least likely fit.
  while (!pool_.empty() && static_cast<size_t>(stats_.pooled_bytes) + bytes > pool_limit_) {
    auto largest = std::prev(pool_.end());
    stats_.pooled_bytes -= static_cast<int64_t>(largest->first);
    pool_.erase(largest);
  }
  pool_.emplace(bytes, std::move(buffer));
  stats_.pooled_bytes += static_cast<int64_t>(bytes);
}

void Allocator::release_cached() {
  std::multimap<size_t, BufferPtr> dropped;
  std::lock_guard lock(mutex_);
  dropped.swap(pool_);
  stats_.pooled_bytes = 0;
}

AllocatorStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace etm
