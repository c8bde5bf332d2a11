// Opaque ABI handles are raw object pointers; a registry of live objects of one type lets
// every entry point reject null, freed and wrong-type handles instead of dereferencing them.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "runtime/error.h"

namespace etm {

template <typename T>
class HandleRegistry {
 public:
  explicit HandleRegistry(const char* kind) : kind_(kind) {}

  T* add(std::unique_ptr<T> object) {
    T* raw = object.get();
    std::unique_lock lock(mutex_);
    live_.emplace(raw, std::move(object));
    return raw;
  }

  // The live object behind `handle`; throws for null or unknown handles.
  T* get(const void* handle) const {
    ETM_REQUIRE(handle, "null ", kind_, " handle");
    std::shared_lock lock(mutex_);
    auto it = live_.find(handle);
    ETM_REQUIRE(it != live_.end(), "invalid ", kind_, " handle ", handle,
                " (freed, or not a ", kind_, ")");
    return it->second.get();
  }

  // Removes and returns the object; throws for null or unknown handles.
  std::unique_ptr<T> remove(const void* handle) {
    ETM_REQUIRE(handle, "null ", kind_, " handle");
    std::unique_lock lock(mutex_);
    auto it = live_.find(handle);
    ETM_REQUIRE(it != live_.end(), "invalid ", kind_, " handle ", handle,
                " (freed, or not a ", kind_, ")");
    std::unique_ptr<T> object = std::move(it->second);
    live_.erase(it);
    return object;
  }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return live_.size();
  }

 private:
  const char* kind_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<T>> live_;
};

// For objects owned elsewhere (kernels belong to their library): a set of valid pointers.
template <typename T>
class BorrowedHandles {
 public:
  explicit BorrowedHandles(const char* kind) : kind_(kind) {}
  void add(T* object) {
    std::unique_lock lock(mutex_);
    live_.emplace(object, object);
  }
  void remove(const T* object) {
    std::unique_lock lock(mutex_);
    live_.erase(object);
  }
  T* get(const void* handle) const {
    ETM_REQUIRE(handle, "null ", kind_, " handle");
    std::shared_lock lock(mutex_);
    auto it = live_.find(handle);
    ETM_REQUIRE(it != live_.end(), "invalid ", kind_, " handle ", handle,
                " (its library was deleted, or not a ", kind_, ")");
    return it->second;
  }

 private:
  const char* kind_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, T*> live_;
};

}  // namespace etm
