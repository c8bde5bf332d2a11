#include "runtime/write_order.h"

#include <algorithm>

namespace etm {

void StreamProgress::completed() {
  std::lock_guard lock(mutex_);
  ++completed_;
  changed_.notify_all();
}

void StreamProgress::wait_for(int64_t sequence) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return completed_ >= sequence; });
}

bool StreamProgress::has_completed(int64_t sequence) {
  std::lock_guard lock(mutex_);
  return completed_ >= sequence;
}

void WriteOrder::record(const std::shared_ptr<StreamProgress>& stream, int64_t sequence,
                        const std::vector<const device::Buffer*>& written,
                        const std::vector<const device::Buffer*>& read) {
  std::lock_guard lock(mutex_);
  for (const device::Buffer* buffer : written) {
    Uses& uses = uses_[buffer];
    uses.writer = Stamp{stream, sequence};
    uses.readers.clear();
  }
  for (const device::Buffer* buffer : read) {
    std::vector<Stamp>& readers = uses_[buffer].readers;
    auto same = std::find_if(readers.begin(), readers.end(), [&](const Stamp& stamp) {
      return stamp.stream.lock() == stream;
    });
    if (same != readers.end())
      same->sequence = sequence;
    else
      readers.push_back(Stamp{stream, sequence});
  }
  if (uses_.size() >= prune_at_) prune_completed();
}

void WriteOrder::wait_before_use(const device::Buffer* buffer, const StreamProgress* stream,
                                 bool writing) {
  std::vector<std::pair<std::shared_ptr<StreamProgress>, int64_t>> pending;
  {
    std::lock_guard lock(mutex_);
    auto it = uses_.find(buffer);
    if (it == uses_.end()) return;
    auto consider = [&](const Stamp& stamp) {
      auto other = stamp.stream.lock();
      if (other && other.get() != stream) pending.emplace_back(std::move(other), stamp.sequence);
    };
    consider(it->second.writer);
    if (writing)
      for (const Stamp& reader : it->second.readers) consider(reader);
  }
  // Outside the lock: the other streams' completion handlers never need it.
  for (auto& [other, sequence] : pending) other->wait_for(sequence);
}

void WriteOrder::prune_completed() {
  auto done = [](const Stamp& stamp) {
    auto stream = stamp.stream.lock();
    return !stream || stamp.sequence == 0 || stream->has_completed(stamp.sequence);
  };
  for (auto it = uses_.begin(); it != uses_.end();) {
    std::vector<Stamp>& readers = it->second.readers;
    readers.erase(std::remove_if(readers.begin(), readers.end(), done), readers.end());
    if (done(it->second.writer) && readers.empty())
      it = uses_.erase(it);
    else
      ++it;
  }
  prune_at_ = std::max<size_t>(4096, uses_.size() * 2);
}

}  // namespace etm
