// A set of pointers for the stream's per-dispatch bookkeeping (buffers bound in the open
// command buffer, and since the last barrier): open addressing, so inserting, finding and
// clearing allocate nothing once the table has grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace etm {

class PointerSet {
 public:
  // True when `pointer` was not in the set yet. `pointer` must not be null.
  bool insert(const void* pointer) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const void*& slot = find_slot(pointer);
    if (slot == pointer) return false;
    slot = pointer;
    ++size_;
    return true;
  }

  bool contains(const void* pointer) const {
    if (size_ == 0) return false;
    return const_cast<PointerSet*>(this)->find_slot(pointer) == pointer;
  }

  void clear() {
    if (size_ == 0) return;
    for (const void*& slot : slots_) slot = nullptr;
    size_ = 0;
  }

  size_t size() const { return size_; }

  template <class Visit>
  void for_each(Visit&& visit) const {
    if (size_ == 0) return;
    for (const void* slot : slots_) {
      if (slot) visit(slot);
    }
  }

 private:
  const void*& find_slot(const void* pointer) {
    const size_t mask = slots_.size() - 1;
    // Allocations are at least 16-byte aligned: drop the low bits, then mix.
    size_t index = static_cast<size_t>((reinterpret_cast<uintptr_t>(pointer) >> 4) *
                                       0x9e3779b97f4a7c15ull >> 20) & mask;
    while (slots_[index] != nullptr && slots_[index] != pointer) index = (index + 1) & mask;
    return slots_[index];
  }

  void grow() {
    std::vector<const void*> old(slots_.size() < 16 ? 32 : slots_.size() * 2, nullptr);
    old.swap(slots_);
    size_ = 0;
    for (const void* pointer : old) {
      if (pointer) insert(pointer);
    }
  }

  std::vector<const void*> slots_;
  size_t size_ = 0;
};

}  // namespace etm
