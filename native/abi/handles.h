// Opaque ABI handles are ids, never object addresses. One process-wide counter hands out each
// value once, so a freed handle stays invalid forever (a later object never takes its value),
// a handle of one kind is never valid as another, and a double delete is an error instead of
// freeing whatever now lives at a reused address. The values are non-canonical addresses, so
// code that dereferences one faults at once instead of reading some object.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/thread_context.h"

namespace etm::abi {

// The calling thread's recent lookups in one registry, in the registry's table of the thread's
// context: a hit takes no lock. A registry advances its generation on every removal, which
// makes all its remembered lookups stale, so a freed handle is never answered from here. A
// registry made after the context's tables ran out remembers nothing (each lookup locks).
class LookupCache {
 public:
  LookupCache() : table_(next_table()) {}

  // The object remembered for `handle` at `generation`, else null.
  void* find(ThreadContext& context, const void* handle, uint64_t generation) const {
    if (table_ >= ThreadContext::kLookupTables) return nullptr;
    const HandleLookup& remembered = entry(context, handle);
    return remembered.handle == handle && remembered.generation == generation ? remembered.object : nullptr;
  }
  void store(ThreadContext& context, const void* handle, void* object, uint64_t generation) const {
    if (table_ < ThreadContext::kLookupTables) entry(context, handle) = {handle, object, generation};
  }

 private:
  static size_t next_table() {
    static std::atomic<size_t> tables{0};
    return tables.fetch_add(1, std::memory_order_relaxed);
  }
  HandleLookup& entry(ThreadContext& context, const void* handle) const {
    // Handles are sequential ids (next_handle_id).
    return context.lookups[table_][(reinterpret_cast<uintptr_t>(handle) >> 4) % ThreadContext::kLookupsPerTable];
  }

  const size_t table_;
};

inline void* next_handle_id() {
  static std::atomic<uint64_t> counter{0};
  constexpr uint64_t kTag = uint64_t{0xE7} << 56;
  return reinterpret_cast<void*>(kTag | (counter.fetch_add(1, std::memory_order_relaxed) + 1) << 4);
}

// Live objects of one kind, owned by the registry and reached through their handles.
template <typename T>
class HandleRegistry {
 public:
  explicit HandleRegistry(const char* kind) : kind_(kind) {}

  void* add(std::unique_ptr<T> object) {
    void* handle = next_handle_id();
    std::unique_lock lock(mutex_);
    live_.emplace(handle, std::move(object));
    return handle;
  }

  // The live object behind `handle`; throws for null, freed and unknown handles. (`context`:
  // the calling thread's, for a caller that has it at hand.)
  T* get(const void* handle, ThreadContext& context = thread_context) const {
    if (void* cached = cache_.find(context, handle, generation_.load(std::memory_order_acquire))) {
      return static_cast<T*>(cached);
    }
    std::shared_lock lock(mutex_);
    T* object = find(live_, handle)->second.get();
    cache_.store(context, handle, object, generation_.load(std::memory_order_relaxed));
    return object;
  }

  // Removes and returns the object; throws for null, freed and unknown handles.
  std::unique_ptr<T> remove(const void* handle) {
    std::unique_lock lock(mutex_);
    auto it = find(live_, handle);
    std::unique_ptr<T> object = std::move(it->second);
    live_.erase(it);
    generation_.fetch_add(1, std::memory_order_release);
    return object;
  }

 private:
  template <typename Map>
  auto find(Map& live, const void* handle) const {
    ETM_REQUIRE(handle, "null ", kind_, " handle");
    auto it = live.find(handle);
    ETM_REQUIRE(it != live.end(), "invalid ", kind_, " handle ", handle, " (freed, or not a ",
                kind_, ")");
    return it;
  }

  const char* kind_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<T>> live_;
  std::atomic<uint64_t> generation_{0};  // removals so far (LookupCache)
  LookupCache cache_;
};

// Handles of objects owned elsewhere (a kernel belongs to its library): one handle per
// object, the same on every request, invalid once the object is withdrawn.
template <typename T>
class BorrowedHandles {
 public:
  explicit BorrowedHandles(const char* kind) : kind_(kind) {}

  void* handle_for(T* object) {
    std::unique_lock lock(mutex_);
    auto [it, inserted] = handles_.try_emplace(object, nullptr);
    if (inserted) {
      it->second = next_handle_id();
      live_.emplace(it->second, object);
    }
    return it->second;
  }

  void withdraw(const T* object) {
    std::unique_lock lock(mutex_);
    auto it = handles_.find(object);
    if (it == handles_.end()) return;
    live_.erase(it->second);
    handles_.erase(it);
    generation_.fetch_add(1, std::memory_order_release);
  }

  T* get(const void* handle, ThreadContext& context = thread_context) const {
    if (void* cached = cache_.find(context, handle, generation_.load(std::memory_order_acquire))) {
      return static_cast<T*>(cached);
    }
    ETM_REQUIRE(handle, "null ", kind_, " handle");
    std::shared_lock lock(mutex_);
    auto it = live_.find(handle);
    ETM_REQUIRE(it != live_.end(), "invalid ", kind_, " handle ", handle,
                " (its library was deleted, or not a ", kind_, ")");
    cache_.store(context, handle, it->second, generation_.load(std::memory_order_relaxed));
    return it->second;
  }

 private:
  const char* kind_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, T*> live_;
  std::unordered_map<const T*, void*> handles_;
  std::atomic<uint64_t> generation_{0};  // withdrawals so far (LookupCache)
  LookupCache cache_;
};

}  // namespace etm::abi
