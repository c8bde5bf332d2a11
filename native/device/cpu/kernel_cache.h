// Keeps the CPU device's on-disk kernel cache bounded. Every entry's modification time is
// the time it was last used (lookups touch it), so eviction removes the least recently used
// entries first. Entries are whole units: a kernel object with its kept source, a
// translation record, a check marker, or a header folder of an older translator.
//
// Several processes share one cache. Removing a file another process has mapped is safe on
// POSIX systems; entries used within `recently_used_seconds` are never removed, so a process
// that has just found an entry can still open it.
#pragma once

#include <cstdint>
#include <string>

namespace etm::device::cpu {

// Records that the cache entry at `path` was used now.
void mark_cache_entry_used(const std::string& path);

// True for the first caller in `period_seconds` among all processes sharing the cache (a
// marker file's modification time records the last one): start-up maintenance walks the whole
// cache, which need not happen on every process start.
bool claim_cache_maintenance(const std::string& cache_directory, double period_seconds);

// Removes files in <cache>/tmp older than `max_age_seconds`: the leftovers of compilers and
// processes killed mid-write. Returns how many were removed.
size_t remove_stale_cache_temporaries(const std::string& cache_directory, double max_age_seconds);

// Removes the precompiled preludes (precompiled-*/ folders) of a header folder.
void remove_precompiled_preludes(const std::string& header_directory);

struct CacheEviction {
  uint64_t bytes_before = 0;
  uint64_t bytes_after = 0;
  size_t entries_removed = 0;
};

// When the cache holds more than `max_bytes`, removes least recently used entries until it
// holds at most `target_bytes` (the folder `current_headers` is kept: this process compiles
// against it).
CacheEviction evict_least_recently_used(const std::string& cache_directory, uint64_t max_bytes,
                                        uint64_t target_bytes, const std::string& current_headers,
                                        double recently_used_seconds);

}  // namespace etm::device::cpu
