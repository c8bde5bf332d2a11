// etmetal_* functions (etmetal/etmetal.h).
#include <mutex>
#include <vector>

#include "abi/guard.h"
#include "device/settings.h"
#include "device/tls_model.h"
#include "etmetal/etmetal.h"

using namespace etm;
using etm::abi::guarded;
using etm::abi::require_out;

extern "C" AOTITorchError etmetal_synchronize(int32_t sync_type) {
  return guarded(__func__, [&] {
    ETM_REQUIRE(sync_type >= ETMETAL_SYNC_NONE && sync_type <= ETMETAL_SYNC_COMMIT_ADAPTIVE,
                "unknown sync type ", sync_type, " (0 to 4)");
    Runtime::get().current_stream().synchronize(static_cast<SyncType>(sync_type));
  });
}

extern "C" const char* etmetal_last_error(void) { return etm::last_error(); }

extern "C" AOTITorchError etmetal_tensor_wait(AtenTensorHandle tensor) {
  return guarded(__func__, [&] {
    const Tensor& t = abi::tensor_of(tensor);
    Stream& stream = Runtime::get().current_stream();
    stream.wait_idle();
    if (t.storage) stream.wait_for_other_streams(t.storage->buffer);
  });
}

extern "C" const char* etmetal_device_name(void) {
  const char* name = "";
  guarded(__func__, [&] { name = Runtime::get().device().name().c_str(); });
  return name;
}

extern "C" const char* etmetal_device_kind(void) {
  const char* kind = "";
  guarded(__func__, [&] { kind = Runtime::get().device().kind(); });
  return kind;
}

extern "C" const char* etmetal_version(void) { return ETMETAL_VERSION; }

extern "C" const char* etmetal_configuration(void) {
  ETM_THREAD_LOCAL std::string text;
  guarded(__func__, [&] { text = settings::describe(); });
  return text.c_str();
}

extern "C" AOTITorchError etmetal_allocator_stats(etmetal_allocator_stats_t* stats) {
  return guarded(__func__, [&] {
    require_out(stats, "stats");
    const AllocatorStats current = Runtime::get().allocator().stats();
    stats->live_bytes = current.live_bytes;
    stats->live_allocations = current.live_allocations;
    stats->pooled_bytes = current.pooled_bytes;
  });
}

extern "C" AOTITorchError etmetal_stream_stats(etmetal_stream_stats_t* stats) {
  return guarded(__func__, [&] {
    require_out(stats, "stats");
    Runtime& runtime = Runtime::get();
    Stream& stream = runtime.current_stream();
    const StreamStats current = stream.stats();
    stats->pending_commands = current.pending_commands;
    stats->pending_bytes = current.pending_bytes;
    stats->committed_buffers = current.committed_buffers;
    stats->completed_buffers = current.completed_buffers;
    stats->max_ops_per_buffer = stream.policy().max_ops_per_buffer;
    stats->max_mb_per_buffer = stream.policy().max_mb_per_buffer;
  });
}

namespace {

// The records of the last closed counting window.
struct CounterRecords {
  std::mutex mutex;
  std::vector<device::DispatchCounters> records;
};

CounterRecords& counter_records() {
  static CounterRecords* records = new CounterRecords();  // outlives static destructors
  return *records;
}

}  // namespace

extern "C" AOTITorchError etmetal_counters_begin(void) {
  return guarded(__func__, [&] {
    const device::Status status = Runtime::get().device().begin_counters();
    ETM_REQUIRE(status.ok(), status.message());
  });
}

extern "C" AOTITorchError etmetal_counters_end(int64_t* count) {
  return guarded(__func__, [&] {
    require_out(count, "count");
    Runtime& runtime = Runtime::get();
    std::vector<device::DispatchCounters> records;
    // The window closes even when the stream's work failed; the failure is reported after.
    std::string failure;
    try {
      runtime.current_stream().synchronize(SyncType::commit_and_wait);
    } catch (const std::exception& error) {
      failure = error.what();
    }
    const device::Status status = runtime.device().end_counters(&records);
    ETM_REQUIRE(status.ok(), status.message());
    ETM_REQUIRE(failure.empty(), failure);
    CounterRecords& stored = counter_records();
    std::lock_guard<std::mutex> lock(stored.mutex);
    stored.records = std::move(records);
    *count = static_cast<int64_t>(stored.records.size());
  });
}

extern "C" AOTITorchError etmetal_counters_read(int64_t index, etmetal_dispatch_counters_t* record) {
  return guarded(__func__, [&] {
    require_out(record, "record");
    CounterRecords& stored = counter_records();
    std::lock_guard<std::mutex> lock(stored.mutex);
    ETM_REQUIRE(index >= 0 && index < static_cast<int64_t>(stored.records.size()), "counter record ", index,
                " is out of range (", stored.records.size(), " records)");
    const device::DispatchCounters& r = stored.records[static_cast<size_t>(index)];
    record->kernel = r.kernel.c_str();
    record->threads = static_cast<int64_t>(r.threads);
    record->threadgroups = static_cast<int64_t>(r.threadgroups);
    record->bytes_read = static_cast<int64_t>(r.bytes_read);
    record->bytes_written = static_cast<int64_t>(r.bytes_written);
  });
}
