#include "device/cpu/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>
#include <vector>

namespace etm::device::cpu {
namespace {

namespace fs = std::filesystem;

struct Entry {
  std::vector<fs::path> paths;  // removed together
  fs::file_time_type last_used = fs::file_time_type::min();
  uint64_t bytes = 0;
};

void add_file(Entry* entry, const fs::path& path) {
  std::error_code error;
  const uint64_t size = fs::file_size(path, error);
  if (!error) entry->bytes += size;
  const fs::file_time_type time = fs::last_write_time(path, error);
  if (!error) entry->last_used = std::max(entry->last_used, time);
  entry->paths.push_back(path);
}

// Objects are grouped by stem (<key>.so with its kept <key>.cpp); records and markers are
// one file each; a header folder is one entry dated by its "complete" marker.
std::vector<Entry> list_entries(const fs::path& root, const std::string& current_headers) {
  std::vector<Entry> entries;
  std::error_code error;
  std::map<std::string, Entry> objects;
  for (const auto& file : fs::directory_iterator(root / "objects", error)) {
    add_file(&objects[file.path().stem().string()], file.path());
  }
  for (auto& [stem, entry] : objects) entries.push_back(std::move(entry));
  for (const char* category : {"translations", "checks"}) {
    for (const auto& file : fs::directory_iterator(root / category, error)) {
      Entry entry;
      add_file(&entry, file.path());
      entries.push_back(std::move(entry));
    }
  }
  for (const auto& folder : fs::directory_iterator(root, error)) {
    const std::string name = folder.path().filename().string();
    if (name.rfind("headers-", 0) != 0 || folder.path() == fs::path(current_headers)) continue;
    Entry entry;
    for (const auto& file : fs::recursive_directory_iterator(folder.path(), error)) {
      if (file.is_regular_file(error)) entry.bytes += file.file_size(error);
    }
    entry.last_used = fs::last_write_time(folder.path() / "complete", error);
    if (error) entry.last_used = fs::file_time_type::min();
    entry.paths.push_back(folder.path());
    entries.push_back(std::move(entry));
  }
  return entries;
}

uint64_t folder_bytes(const fs::path& folder) {
  uint64_t bytes = 0;
  std::error_code error;
  for (const auto& file : fs::recursive_directory_iterator(folder, error)) {
    if (file.is_regular_file(error)) bytes += file.file_size(error);
  }
  return bytes;
}

}  // namespace

void mark_cache_entry_used(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
}

bool claim_cache_maintenance(const std::string& cache_directory, double period_seconds) {
  const fs::path marker = fs::path(cache_directory) / "maintained";
  std::error_code error;
  const fs::file_time_type last = fs::last_write_time(marker, error);
  if (!error && last > fs::file_time_type::clock::now() -
                           std::chrono::duration_cast<fs::file_time_type::duration>(
                               std::chrono::duration<double>(period_seconds))) {
    return false;
  }
  std::ofstream(marker, std::ios::app);  // creates it when missing
  mark_cache_entry_used(marker.string());
  return true;
}

size_t remove_stale_cache_temporaries(const std::string& cache_directory, double max_age_seconds) {
  const auto oldest_kept = fs::file_time_type::clock::now() -
                           std::chrono::duration_cast<fs::file_time_type::duration>(
                               std::chrono::duration<double>(max_age_seconds));
  std::error_code error;
  std::vector<fs::path> stale;
  for (const auto& file : fs::directory_iterator(fs::path(cache_directory) / "tmp", error)) {
    const fs::file_time_type time = fs::last_write_time(file.path(), error);
    if (!error && time < oldest_kept) stale.push_back(file.path());
  }
  size_t removed = 0;
  for (const fs::path& path : stale) {
    if (fs::remove_all(path, error) > 0 && !error) ++removed;
  }
  return removed;
}

void remove_precompiled_preludes(const std::string& header_directory) {
  std::error_code error;
  std::vector<fs::path> folders;
  for (const auto& folder : fs::directory_iterator(header_directory, error)) {
    if (folder.path().filename().string().rfind("precompiled-", 0) == 0) folders.push_back(folder.path());
  }
  for (const fs::path& folder : folders) fs::remove_all(folder, error);
}

CacheEviction evict_least_recently_used(const std::string& cache_directory, uint64_t max_bytes,
                                        uint64_t target_bytes, const std::string& current_headers,
                                        double recently_used_seconds) {
  CacheEviction result;
  const fs::path root(cache_directory);
  result.bytes_before = folder_bytes(root);
  result.bytes_after = result.bytes_before;
  if (result.bytes_before <= max_bytes) return result;

  std::vector<Entry> entries = list_entries(root, current_headers);
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  const auto protected_since = fs::file_time_type::clock::now() -
                               std::chrono::duration_cast<fs::file_time_type::duration>(
                                   std::chrono::duration<double>(recently_used_seconds));
  std::error_code error;
  for (const Entry& entry : entries) {
    if (result.bytes_after <= target_bytes || entry.last_used >= protected_since) break;
    for (const fs::path& path : entry.paths) fs::remove_all(path, error);
    result.bytes_after -= std::min(result.bytes_after, entry.bytes);
    ++result.entries_removed;
  }
  return result;
}

}  // namespace etm::device::cpu
