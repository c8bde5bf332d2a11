// Builds translated kernel sources into shared objects with the host C++ compiler, through
// an on-disk cache shared by processes.
//
// Compiler: $ETMETAL_CXX, else the first of g++ (>= 12) and clang++ (>= 15) on PATH;
// $ETMETAL_CXXFLAGS adds flags. Kernels target the host's vector ISA (-march=native, and
// 512-bit vectors on x86 parts with AVX-512F and AVX512-VBMI) unless the cache may be shared
// (ETMETAL_CACHE_DIR set) or ETMETAL_CPU_ISA=portable.
// Cache: $ETMETAL_CACHE_DIR, else $XDG_CACHE_HOME/etmetal, else ~/.cache/etmetal. Objects
// are keyed by a hash of the translated source, the kernel selection, the compiler's
// identity, the flags, the host CPU's features (when compiling for them), the translator
// version and the embedded headers; they are written
// under a temporary name and renamed into place, so concurrent builders never see a
// partial file.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "device/device.h"

namespace etm::device::cpu {

class KernelCompiler {
 public:
  // The process-wide compiler; fails when no suitable compiler or cache directory exists.
  static Status get(KernelCompiler** out);

  // True for clang (which has no -fsingle-precision-constant: the translator suffixes
  // float literals instead).
  bool is_clang() const { return is_clang_; }
  const std::string& cache_directory() const { return cache_directory_; }

  // Produces the translated source when the cache cannot answer without it.
  using SourceProvider = std::function<Status(std::string* source)>;

  // Builds (or finds in the cache) the object for the kernel with this entry index of the
  // translated source whose content_hash is `source_hash`; `specialization` adds compiler
  // flags (function constant values), which are part of the cache key.
  Status build_kernel(const std::string& source_hash, uint32_t entry_index,
                      const std::vector<std::string>& specialization, const SourceProvider& source,
                      std::string* object_path);
  // Compiles every kernel of the source without generating code, to report errors.
  // `extra` adds compiler flags (part of the check's cache key).
  Status check_library(const std::string& source_hash, const SourceProvider& source,
                       const std::vector<std::string>& extra = {});

  // Small cache records (translation results), by category and key; written atomically.
  bool read_record(const std::string& category, const std::string& key, std::string* text) const;
  void write_record(const std::string& category, const std::string& key, const std::string& text);

 private:
  KernelCompiler() = default;
  Status initialize();
  Status write_headers();
  std::string key_for(const std::string& source_hash, const std::vector<std::string>& selection) const;
  // Evicts least recently used entries when the cache is over ETMETAL_CACHE_MAX_MB.
  void enforce_cache_limit();
  // Counts a newly stored entry toward the next eviction check.
  void note_stored(const std::string& path);
  Status run_compiler(const std::string& source, const std::vector<std::string>& selection, bool syntax_only,
                      const std::string& output_path);
  // Precompiles kernel_support/etm_cpu_prelude.h for g++ once per compiler, flags and header
  // set (a cache entry shared by processes); sets precompiled_include_ when it exists.
  void prepare_precompiled_prelude();
  bool room_for_precompiled_prelude() const;

  std::string compiler_path_;
  std::string description_;  // the compiler's --version output (its identity)
  bool is_clang_ = false;
  std::string cache_directory_;
  std::string header_directory_;
  std::string headers_hash_;
  std::vector<std::string> flags_;
  std::once_flag precompile_once_;
  std::string precompiled_include_;  // -I<folder of the precompiled prelude>, or empty
  std::string isa_identity_;  // the host CPU's features when compiling for them, else empty
  uint64_t cache_max_bytes_ = 0;  // 0: no limit
  std::atomic<uint64_t> bytes_since_eviction_{0};
  std::mutex eviction_mutex_;
};

// A 128-bit content hash as 32 hex digits (for cache keys).
std::string content_hash(const std::string& data);

}  // namespace etm::device::cpu
