// Ordering across threads. Each thread encodes into its own stream, and nothing orders two
// command queues, so a buffer's last writer and readers are stamped here when their command
// buffer is committed. A stream that then uses the buffer waits for another stream's earlier
// work first: a read for the last write, a write also for the reads since. Work a thread has
// not committed yet is not visible here: it must commit before handing a tensor over.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "device/device.h"

namespace etm {

// How far one stream's committed command buffers have completed (they complete in order).
class StreamProgress {
 public:
  // The sequence number of the next command buffer to commit (1, 2, ...).
  int64_t next_sequence() const { return committed_ + 1; }
  void committed() { ++committed_; }
  void completed();
  // Blocks until command buffer `sequence` of this stream has completed.
  void wait_for(int64_t sequence);
  bool has_completed(int64_t sequence);

 private:
  int64_t committed_ = 0;  // only the stream's own thread touches it
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t completed_ = 0;
};

class WriteOrder {
 public:
  // Stamps the buffers a command buffer of `stream` (sequence number `sequence`) uses.
  void record(const std::shared_ptr<StreamProgress>& stream, int64_t sequence,
              const std::vector<const device::Buffer*>& written,
              const std::vector<const device::Buffer*>& read);
  // Waits until other streams' committed work that must precede a use of `buffer` by
  // `stream` (a write when `writing`) has completed.
  void wait_before_use(const device::Buffer* buffer, const StreamProgress* stream, bool writing);

 private:
  struct Stamp {
    std::weak_ptr<StreamProgress> stream;
    int64_t sequence = 0;
  };
  struct Uses {
    Stamp writer;
    std::vector<Stamp> readers;  // at most one per stream, since the last write
  };
  void prune_completed();

  std::mutex mutex_;
  std::unordered_map<const device::Buffer*, Uses> uses_;
  size_t prune_at_ = 4096;
};

}  // namespace etm
