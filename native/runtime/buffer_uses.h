// The buffers bound in a stream's open command buffer, one entry per buffer: whether a command
// there writes it, and the barrier intervals in which it was last bound and last bound for
// writing (a dispatch that writes a buffer bound since the last barrier, or reads one written
// since, needs a new barrier first; readers need none between them). One table, so a dispatch
// looks each of its buffers up once; open addressing, so recording, finding and clearing
// allocate nothing once the table has grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace etm {

class BufferUses {
 public:
  struct Use {
    const void* buffer = nullptr;
    uint32_t interval = 0;  // the barrier interval of its last binding (0: none)
    uint32_t written_interval = 0;  // ... of its last binding by a command that may write it
    bool written = false;
  };

  // Room for `more` new buffers: until then find_or_add moves no entry, so references to
  // entries stay valid.
  void reserve(size_t more) {
    while ((size_ + more) * 2 > slots_.size()) grow();
  }

  // The entry of `buffer` (not null); a new one, unbound and unwritten, sets *added. Call
  // reserve first.
  Use& find_or_add(const void* buffer, bool* added) {
    Use& use = slot_of(buffer);
    *added = use.buffer == nullptr;
    if (*added) {
      use.buffer = buffer;
      ++size_;
    }
    return use;
  }

  // The barrier interval now running; next_interval() starts the next one, after which no
  // buffer counts as bound (or written) since the barrier.
  uint32_t interval() const { return interval_; }
  void next_interval() {
    if (++interval_ == 0) interval_ = 1;  // after a wrap a stale entry only adds a barrier
  }

  size_t size() const { return size_; }

  void clear() {
    if (size_ == 0) return;
    for (Use& use : slots_) use = Use{};
    size_ = 0;
  }

  template <class Visit>
  void for_each(Visit&& visit) const {
    if (size_ == 0) return;
    for (const Use& use : slots_) {
      if (use.buffer) visit(use);
    }
  }

 private:
  Use& slot_of(const void* buffer) {
    const size_t mask = slots_.size() - 1;
    // Allocations are at least 16-byte aligned: drop the low bits, then mix.
    size_t index = static_cast<size_t>((reinterpret_cast<uintptr_t>(buffer) >> 4) * 0x9e3779b97f4a7c15ull >> 20) & mask;
    while (slots_[index].buffer != nullptr && slots_[index].buffer != buffer) index = (index + 1) & mask;
    return slots_[index];
  }

  void grow() {
    std::vector<Use> old(slots_.size() < 16 ? 32 : slots_.size() * 2);
    old.swap(slots_);
    for (const Use& use : old) {
      if (use.buffer) slot_of(use.buffer) = use;
    }
  }

  std::vector<Use> slots_;
  size_t size_ = 0;
  uint32_t interval_ = 1;
};

}  // namespace etm
