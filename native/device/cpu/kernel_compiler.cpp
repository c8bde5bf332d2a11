#include "device/cpu/kernel_compiler.h"

#include "device/cpu/dispatch_counters.h"
#include "device/cpu/dispatch_validation.h"
#include "device/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "device/cpu/embedded_headers.h"
#include "device/cpu/kernel_cache.h"
#include "device/cpu/msl_preprocessor.h"
#include "device/cpu/msl_translator.h"

extern char** environ;

namespace etm::device::cpu {
namespace {

// ------------------------------------------------------------------- files, processes

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool make_directories(const std::string& path) {
  std::string partial;
  std::stringstream parts(path);
  std::string part;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    partial += part + "/";
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool write_file(const std::string& path, const char* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(size));
  return static_cast<bool>(out.flush());
}

bool read_file(const std::string& path, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return true;
}

// Removes a header folder this process wrote (only the files it knows it put there).
void remove_tree(const std::string& path) {
  for (size_t i = 0; i < kEmbeddedKernelHeaders_count; ++i) {
    std::string relative = kEmbeddedKernelHeaders[i].path;
    ::unlink((path + "/" + relative).c_str());
    for (size_t slash = relative.rfind('/'); slash != std::string::npos; slash = relative.rfind('/')) {
      relative.resize(slash);
      ::rmdir((path + "/" + relative).c_str());
    }
  }
  ::unlink((path + "/complete").c_str());
  ::rmdir(path.c_str());
}

// A name unique among the processes and threads writing into the cache.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// Runs argv[0] (searched on PATH), collecting stdout and stderr together. With a timeout
// (seconds, > 0), a process still running then is killed with its children (the compiler
// driver's cc1plus, ld: the child leads its own process group) and *timed_out is set.
bool run_process(const std::vector<std::string>& argv, std::string* output, int* exit_code,
                 double timeout_seconds = 0, bool* timed_out = nullptr) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return false;
  ::fcntl(pipe_fds[0], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    return false;
  }
  if (timed_out) *timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buffer[4096];
  for (;;) {
    if (timeout_seconds > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd readable{pipe_fds[0], POLLIN, 0};
      const int ready = left.count() > 0 ? ::poll(&readable, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        if (std::chrono::steady_clock::now() < deadline) continue;
        ::kill(-pid, SIGKILL);
        if (timed_out) *timed_out = true;
        break;
      }
    }
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) {
      output->append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

// $ETMETAL_COMPILE_TIMEOUT_S: seconds one kernel compile may take (default 300, enough for
// the largest template-heavy kernels on a loaded machine); 0 means no limit.
double compile_timeout_seconds() {
  const char* text = std::getenv("ETMETAL_COMPILE_TIMEOUT_S");
  if (!text || !*text) return 300;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  return end && *end == '\0' && value >= 0 ? value : 300;
}

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return file_exists(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string default_cache_directory() {
  std::string dir = environment("ETMETAL_CACHE_DIR");
  if (!dir.empty()) return dir;
  dir = environment("XDG_CACHE_HOME");
  if (!dir.empty()) return dir + "/etmetal";
  dir = environment("HOME");
  if (!dir.empty()) return dir + "/.cache/etmetal";
  return "/tmp/etmetal-cache-" + std::to_string(::getuid());
}

// ------------------------------------------------------------------------ target ISA

// The instruction-set features of this machine's CPU as the kernel reads them (Linux:
// /proc/cpuinfo's model and feature lines); empty when they cannot be read.
std::string host_cpu_features() {
  std::ifstream in("/proc/cpuinfo");
  std::string identity;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == "flags" || key == "Features" || key == "model name" || key == "CPU part") {
      identity += line + '\n';
    }
    if (line.empty() && !identity.empty()) break;  // the first processor describes all
  }
  return identity;
}

// Whether `features` (host_cpu_features) lists `name` on its x86 "flags" line.
[[maybe_unused]] bool cpu_feature_listed(const std::string& features, const std::string& name) {
  std::istringstream lines(features);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, 5, "flags") != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string word; words >> word;) {
      if (word == name) return true;
    }
  }
  return false;
}

// Kernels are compiled for the host's vector ISA (-march=native) when the cache belongs to
// this machine: the default cache, or ETMETAL_CPU_ISA=native. A cache named by
// ETMETAL_CACHE_DIR may be shared between machines, so its objects use the compiler's
// portable baseline unless ETMETAL_CPU_ISA=native says otherwise. Returns the flags and,
// in `identity`, what must be part of every cache key (the host's CPU features).
std::vector<std::string> target_isa_flags(std::string* identity) {
  identity->clear();
  const std::string requested = environment("ETMETAL_CPU_ISA");
  const bool native = requested.empty() ? environment("ETMETAL_CACHE_DIR").empty() : requested == "native";
  if (!native) return {};
  *identity = host_cpu_features();
  if (identity->empty()) return {};  // cannot key the cache by the CPU: stay portable
#if defined(__aarch64__)
  return {"-mcpu=native"};
#else
  // The baseline x86-64 ISA has no FMA: without contraction, results stay bit-identical to
  // the portable build's (and to the tests' references).
  std::vector<std::string> flags = {"-march=native", "-ffp-contract=off"};
  // g++ and clang vectorize for 256-bit registers on every Intel AVX-512 part unless told
  // otherwise. 512-bit loops win here (Sapphire Rapids class, 1 worker: mm 1024^3 ~30% and
  // unet_like ~10% faster, no model slower): matmul_panels' 8 x 32 float strip needs 16 zmm
  // registers, or all 32 ymm ones and spills. Skylake-SP, Cascade Lake and Cooper Lake keep
  // 256 bits: they lower the core's clock for heavy 512-bit code (and many have one 512-bit
  // FMA port, so no FMA gain to pay for it). AVX512-VBMI marks the parts after them (Ice Lake
  // on, and AMD Zen 4 on), whose 512-bit code costs little or no frequency.
  if (cpu_feature_listed(*identity, "avx512f") && cpu_feature_listed(*identity, "avx512vbmi")) {
    flags.push_back("-mprefer-vector-width=512");
  }
  return flags;
#endif
}

// ------------------------------------------------------------------- compiler identity

struct CompilerProbe {
  std::string version_text;
  bool clang = false;
  int major = 0;
};

// Runs `compiler --version` once per (path, size, modification time); the answer is kept
// in the cache so later processes do not spawn the compiler just to identify it.
bool probe_compiler(const std::string& path, const std::string& cache_directory, CompilerProbe* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  const std::string identity = path + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtime);
  const std::string record = cache_directory + "/compilers/" + content_hash(identity) + ".txt";
  std::string text;
  if (!read_file(record, &text) || text.empty()) {
    int code = 0;
    if (!run_process({path, "--version"}, &text, &code) || code != 0 || text.empty()) return false;
    const std::string temporary = record + "." + unique_suffix();
    if (write_file(temporary, text.data(), text.size())) std::rename(temporary.c_str(), record.c_str());
  }
  out->version_text = text;
  // "clang version 16.0.6 ..." anywhere, or g++'s first line ending in its version:
  // "g++ (Debian 12.2.0-14) 12.2.0".
  const size_t clang = text.find("clang version ");
  std::string version;
  if (clang != std::string::npos) {
    out->clang = true;
    version = text.substr(clang + 14);
  } else {
    const std::string first_line = text.substr(0, text.find('\n'));
    const size_t end = first_line.find_last_not_of(" \t\r");
    if (end == std::string::npos) return false;
    const size_t begin = first_line.find_last_of(" \t", end);
    version = first_line.substr(begin == std::string::npos ? 0 : begin + 1);
  }
  if (version.empty() || !std::isdigit(static_cast<unsigned char>(version[0]))) return false;
  out->major = std::atoi(version.c_str());
  return true;
}

bool acceptable(const CompilerProbe& probe) {
  return probe.clang ? probe.major >= 15 : probe.major >= 12;
}

// ---------------------------------------------------------------------- diagnostics

// The compiler's complaint, reduced to the first errors at MSL lines with their source
// excerpts; paths of the cache and temporary files are dropped.
std::string summarize_diagnostics(const std::string& output, const std::string& header_directory,
                                  const std::string& source_path) {
  std::string text = output;
  auto replace_all = [&](const std::string& from, const std::string& to) {
    if (from.empty()) return;
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  replace_all(header_directory + "/", "");
  replace_all(source_path, "<kernel source>");
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> kept;
  int errors = 0;
  bool in_error = false;
  const std::string msl_prefix = std::string(kMslSourceName) + ":";
  while (std::getline(lines, line) && errors <= 5) {
    const bool is_error = line.find(": error:") != std::string::npos ||
                          line.find(": fatal error:") != std::string::npos ||
                          line.find("ld: ") != std::string::npos;  // the linker's complaints
    if (is_error) {
      if (++errors > 5) break;
      kept.push_back(line);
      in_error = true;
      continue;
    }
    if (line.rfind(msl_prefix, 0) == 0 && line.find("required from") != std::string::npos) {
      kept.push_back(line);
      continue;
    }
    // Source excerpt and caret lines that follow an error.
    if (in_error && !line.empty() && line[0] == ' ') {
      kept.push_back(line);
      continue;
    }
    in_error = false;
  }
  if (kept.empty()) {
    std::istringstream all(text);
    for (int i = 0; i < 20 && std::getline(all, line); ++i) kept.push_back(line);
  }
  std::string summary;
  for (const std::string& k : kept) summary += k + "\n";
  if (!summary.empty()) summary.pop_back();
  return summary;
}

}  // namespace

// -------------------------------------------------------------------------- hashing

std::string content_hash(const std::string& data) {
  // Two independent 64-bit lanes (multiply-rotate mixing); not cryptographic, which a
  // cache key of the user's own sources does not need.
  const uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full, p3 = 0x165667B19E3779F9ull;
  uint64_t a = 0x243F6A8885A308D3ull ^ data.size(), b = 0x13198A2E03707344ull + data.size();
  auto rotl = [](uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, data.data() + i, 8);
    a = rotl(a ^ (word * p1), 31) * p2;
    b = rotl(b + (word * p3), 29) * p1 ^ a;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data.data() + i, data.size() - i);
  a = rotl(a ^ (tail * p1), 31) * p2;
  b = rotl(b + (tail * p3), 29) * p1 ^ a;
  auto finish = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    return x ^ (x >> 33);
  };
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(finish(a)),
                static_cast<unsigned long long>(finish(b ^ a)));
  return text;
}

// ------------------------------------------------------------------------ the compiler

Status KernelCompiler::get(KernelCompiler** out) {
  static std::mutex mutex;
  static KernelCompiler* instance = nullptr;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (!instance && failure.empty()) {
    auto* compiler = new KernelCompiler();
    const Status status = compiler->initialize();
    if (status.ok()) {
      instance = compiler;
    } else {
      failure = status.message();
      delete compiler;
    }
  }
  if (!instance) return Status::error(failure);
  *out = instance;
  return Status();
}

Status KernelCompiler::initialize() {
  cache_directory_ = default_cache_directory() + "/cpu";
  for (const char* sub : {"", "/objects", "/checks", "/compilers", "/translations", "/tmp"}) {
    if (!make_directories(cache_directory_ + sub)) {
      return Status::error("cannot create the kernel cache directory " + cache_directory_ + sub +
                           ": " + std::strerror(errno) + " (set ETMETAL_CACHE_DIR)");
    }
  }

  CompilerProbe probe;
  const std::string requested = environment("ETMETAL_CXX");
  if (!requested.empty()) {
    compiler_path_ = find_on_path(requested);
    if (compiler_path_.empty()) return Status::error("ETMETAL_CXX=" + requested + " was not found");
    if (!probe_compiler(compiler_path_, cache_directory_, &probe)) {
      return Status::error("ETMETAL_CXX=" + requested + " does not answer --version like g++ or clang++");
    }
    if (!acceptable(probe)) {
      return Status::error("ETMETAL_CXX=" + requested + " is too old (" + (probe.clang ? "clang " : "g++ ") +
                           std::to_string(probe.major) + "); the CPU device needs clang >= 15 or g++ >= 12");
    }
  } else {
    std::string rejected;
    // g++ first: the emulated Metal headers are developed and tested against it.
    for (const char* name : {"g++", "g++-14", "g++-13", "g++-12", "clang++", "clang++-19", "clang++-18",
                             "clang++-17", "clang++-16", "clang++-15"}) {
      const std::string path = find_on_path(name);
      CompilerProbe candidate;
      if (path.empty() || !probe_compiler(path, cache_directory_, &candidate)) continue;
      if (acceptable(candidate)) {
        compiler_path_ = path;
        probe = candidate;
        break;
      }
      rejected += std::string(rejected.empty() ? "" : ", ") + path + " (" +
                  (candidate.clang ? "clang " : "g++ ") + std::to_string(candidate.major) + ")";
    }
    if (compiler_path_.empty()) {
      return Status::error("the CPU device needs a C++ compiler to run Metal kernels: clang++ >= 15 or "
                           "g++ >= 12 on PATH, or ETMETAL_CXX" +
                           (rejected.empty() ? std::string() : "; too old: " + rejected));
    }
  }
  description_ = probe.version_text.substr(0, probe.version_text.find('\n'));
  is_clang_ = probe.clang;

  Status status = write_headers();
  if (!status.ok()) return status;
  int64_t max_megabytes = 1024;
  status = settings::read_integer("ETMETAL_CACHE_MAX_MB", &max_megabytes);
  if (!status.ok()) return status;
  cache_max_bytes_ = uint64_t(max_megabytes) << 20;
  mark_cache_entry_used(header_directory_ + "/complete");
  if (claim_cache_maintenance(cache_directory_, 3600.0)) {
    // A compile killed with its process leaves its temporaries; none lives longer than a compile.
    remove_stale_cache_temporaries(cache_directory_, std::max(3600.0, 2 * compile_timeout_seconds()));
    enforce_cache_limit();
  }

  flags_ = {"-std=c++20", "-O2", "-fPIC", "-fvisibility=hidden", "-ffunction-sections",
            "-fdata-sections", "-fno-exceptions", "-fno-math-errno", "-fno-plt", "-w",
            "-fdiagnostics-color=never", "-I" + header_directory_ + "/metal_include",
            "-I" + header_directory_ + "/kernel_support",
            // A large kernel frame probes its pages in order, so a stack overflow always meets
            // the guard page (and becomes that dispatch's error, kernel_faults.h).
            "-fstack-clash-protection"};
  // Thread-locals keep the default TLS dialect (-mtls-dialect=gnu2 must not come back): its
  // descriptor call is assumed to preserve every register, but glibc before 2.40 clobbers the
  // vector registers on its slow path (sourceware bug 31372), and kernels that kept their group
  // pointer in a register across that call faulted after other kernel objects were loaded.
  for (std::string& flag : target_isa_flags(&isa_identity_)) flags_.push_back(std::move(flag));
  std::istringstream extra(environment("ETMETAL_CXXFLAGS"));
  for (std::string flag; extra >> flag;) flags_.push_back(flag);
  if (is_clang_) {
    flags_.push_back("-ferror-limit=10");
  } else {
    // Each kernel object keeps its own etm_cpu_lanes (etm_lane.h).
    flags_.push_back("-fno-gnu-unique");
    flags_.push_back("-fsingle-precision-constant");
    flags_.push_back("-fmax-errors=10");
  }
  if (counters_enabled() || validation_enabled()) {
    for (const std::string& flag : instrumentation_compiler_flags(is_clang_)) flags_.push_back(flag);
  }
  if (counters_enabled()) flags_.push_back("-DETM_CPU_COUNTERS=1");
  if (validation_enabled()) {
    flags_.push_back("-DETM_CPU_VALIDATE=1");
    flags_.push_back("-g1");  // line tables: reports name the MSL line
#if defined(__x86_64__)
    if (!is_clang_) {
      // The access hooks find the checks' state in r15 instead of a thread-local
      // (etm_cpu_kernel.h): reserved in the whole object.
      flags_.push_back("-ffixed-r15");
      flags_.push_back("-DETM_CPU_VALIDATION_STATE_IN_R15=1");
    }
#endif
  }
  return Status();
}

Status KernelCompiler::write_headers() {
  std::string all;
  for (size_t i = 0; i < kEmbeddedKernelHeaders_count; ++i) {
    all += kEmbeddedKernelHeaders[i].path;
    all += '\0';
    all.append(kEmbeddedKernelHeaders[i].contents, kEmbeddedKernelHeaders[i].size);
  }
  headers_hash_ = content_hash(all);
  header_directory_ = cache_directory_ + "/headers-" + headers_hash_;
  if (file_exists(header_directory_ + "/complete")) return Status();
  // Written under a temporary name and renamed, so readers never see half a folder.
  const std::string temporary = cache_directory_ + "/tmp/headers-" + unique_suffix();
  for (size_t i = 0; i < kEmbeddedKernelHeaders_count; ++i) {
    const EmbeddedFile& file = kEmbeddedKernelHeaders[i];
    const std::string path = temporary + "/" + file.path;
    if (!make_directories(path.substr(0, path.rfind('/'))) || !write_file(path, file.contents, file.size)) {
      remove_tree(temporary);
      return Status::error("cannot write the kernel headers into " + temporary);
    }
  }
  write_file(temporary + "/complete", "", 0);
  if (std::rename(temporary.c_str(), header_directory_.c_str()) != 0) {
    remove_tree(temporary);  // another process won the race
    if (!file_exists(header_directory_ + "/complete")) {
      return Status::error("cannot install the kernel headers into " + header_directory_);
    }
  }
  return Status();
}

std::string KernelCompiler::key_for(const std::string& source_hash, const std::vector<std::string>& selection) const {
  std::string material = msl_translator_identity() + '\0' + description_ + '\0' + compiler_path_ +
                         '\0' + headers_hash_ + '\0' + isa_identity_ + '\0';
  for (const std::string& flag : selection) material += flag + '\0';
  material += '\0';
  for (const std::string& flag : flags_) material += flag + '\0';
  return content_hash(material + source_hash);
}

bool KernelCompiler::read_record(const std::string& category, const std::string& key, std::string* text) const {
  const std::string path = cache_directory_ + "/" + category + "/" + key;
  if (!read_file(path, text)) return false;
  mark_cache_entry_used(path);
  return true;
}

void KernelCompiler::write_record(const std::string& category, const std::string& key, const std::string& text) {
  const std::string path = cache_directory_ + "/" + category + "/" + key;
  const std::string temporary = cache_directory_ + "/tmp/" + key + "-" + unique_suffix();
  if (write_file(temporary, text.data(), text.size())) {
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      ::unlink(temporary.c_str());
    } else {
      note_stored(path);
    }
  }
}

// The precompiled prelude is about 13 MB per flag set and lives in the header folder, which
// is never evicted while in use: a cache limited below 64 MB does without it.
bool KernelCompiler::room_for_precompiled_prelude() const {
  return cache_max_bytes_ == 0 || cache_max_bytes_ >= (uint64_t(64) << 20);
}

void KernelCompiler::enforce_cache_limit() {
  if (cache_max_bytes_ == 0) return;
  std::lock_guard<std::mutex> lock(eviction_mutex_);
  bytes_since_eviction_ = 0;
  if (!room_for_precompiled_prelude()) {
    // Left by a process with a larger limit; one compiling against it now keeps its open file,
    // and later compiles read the header text.
    remove_precompiled_preludes(header_directory_);
  }
  // Down to 90% of the limit, so that the next few compiles do not evict again; what another
  // process touched in the last minute stays.
  evict_least_recently_used(cache_directory_, cache_max_bytes_, cache_max_bytes_ / 10 * 9, header_directory_,
                            60.0);
}

void KernelCompiler::note_stored(const std::string& path) {
  if (cache_max_bytes_ == 0) return;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;
  // The cache is measured again after a twentieth of the limit was written.
  if (bytes_since_eviction_.fetch_add(uint64_t(st.st_size)) + uint64_t(st.st_size) > cache_max_bytes_ / 20) {
    enforce_cache_limit();
  }
}

// Most of a small kernel's compile is parsing the kernel-support headers, so g++ gets them
// precompiled. g++ looks for "etm_cpu_prelude.h.gch" in each include folder before the header
// itself and uses it only where it judges it valid (same compiler, options and macros), else
// reads the header: a missing, stale or damaged file costs time, never a result. clang is left
// out: its precompiled headers are named on the command line and fail the compile when stale.
void KernelCompiler::prepare_precompiled_prelude() {
  if (is_clang_ || !room_for_precompiled_prelude()) return;
  std::string material = description_ + '\0' + compiler_path_ + '\0';
  for (const std::string& flag : flags_) material += flag + '\0';
  const std::string folder = header_directory_ + "/precompiled-" + content_hash(material);
  const std::string path = folder + "/etm_cpu_prelude.h.gch";
  if (!file_exists(path)) {
    const std::string temporary = cache_directory_ + "/tmp/prelude-" + unique_suffix() + ".gch";
    std::vector<std::string> argv = {compiler_path_};
    argv.insert(argv.end(), flags_.begin(), flags_.end());
    // Defined as each translated source defines them before its #include.
    for (const auto& [name, value] : predefined_metal_macros(kCpuMetalVersion)) {
      argv.push_back("-D" + name + "=" + value);
    }
    argv.insert(argv.end(), {"-x", "c++-header", header_directory_ + "/kernel_support/etm_cpu_prelude.h", "-o",
                             temporary});
    std::string output;
    int code = 0;
    bool timed_out = false;
    const bool built = run_process(argv, &output, &code, compile_timeout_seconds(), &timed_out) && code == 0 &&
                       !timed_out && make_directories(folder) && std::rename(temporary.c_str(), path.c_str()) == 0;
    if (!built) ::unlink(temporary.c_str());
  }
  if (file_exists(path)) precompiled_include_ = "-I" + folder;
}

Status KernelCompiler::run_compiler(const std::string& source, const std::vector<std::string>& selection,
                                    bool syntax_only, const std::string& output_path) {
  std::call_once(precompile_once_, [this] { prepare_precompiled_prelude(); });
  const std::string base = cache_directory_ + "/tmp/" + unique_suffix();
  const std::string source_path = base + ".cpp";
  if (!write_file(source_path, source.data(), source.size())) {
    return Status::error("cannot write " + source_path);
  }
  std::vector<std::string> argv = {compiler_path_};
  // First, so that g++ finds the precompiled prelude before the header's own folder.
  if (!precompiled_include_.empty()) argv.push_back(precompiled_include_);
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  argv.insert(argv.end(), selection.begin(), selection.end());
  if (syntax_only) {
    argv.push_back("-fsyntax-only");
  } else {
    argv.push_back("-shared");
#if defined(__APPLE__)
    argv.push_back("-Wl,-dead_strip");
    argv.push_back("-undefined");
    argv.push_back("dynamic_lookup");
#else
    argv.push_back("-Wl,--gc-sections");
#endif
    argv.push_back("-o");
    argv.push_back(output_path);
  }
  argv.push_back(source_path);
  std::string output;
  int code = 0;
  bool timed_out = false;
  const double timeout = compile_timeout_seconds();
  const bool ran = run_process(argv, &output, &code, timeout, &timed_out);
  std::string kept_source = output_path.empty() ? "" : output_path.substr(0, output_path.rfind('.')) + ".cpp";
  if (ran && code == 0 && !kept_source.empty()) {
    std::rename(source_path.c_str(), kept_source.c_str());  // kept next to the object, for debugging
  } else {
    ::unlink(source_path.c_str());
  }
  if (!ran) return Status::error("cannot run the C++ compiler " + compiler_path_);
  if (timed_out) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout);
    return Status::error(std::string("MSL compilation failed: the C++ compiler did not finish within ") + seconds +
                         " s (ETMETAL_COMPILE_TIMEOUT_S) and was stopped; the kernel source may be pathological "
                         "(for example, expressions nested thousands deep)");
  }
  if (code != 0) {
    return Status::error("MSL compilation failed:\n" +
                         summarize_diagnostics(output, header_directory_, source_path));
  }
  return Status();
}

Status KernelCompiler::build_kernel(const std::string& source_hash, uint32_t entry_index,
                                    const std::vector<std::string>& specialization,
                                    const SourceProvider& provide_source, std::string* object_path) {
  std::vector<std::string> selection = {"-DETM_CPU_ALL_KERNELS=0", "-DETM_CPU_KERNEL_INDEX=" + std::to_string(entry_index)};
  selection.insert(selection.end(), specialization.begin(), specialization.end());
  const std::string key = key_for(source_hash, selection);
  const std::string final_path = cache_directory_ + "/objects/" + key + ".so";
  *object_path = final_path;
  if (file_exists(final_path)) {
    mark_cache_entry_used(final_path);
    return Status();
  }
  std::string source;
  Status status = provide_source(&source);
  if (!status.ok()) return status;
  const std::string temporary = cache_directory_ + "/tmp/" + key + "-" + unique_suffix() + ".so";
  status = run_compiler(source, selection, false, temporary);
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  const std::string temporary_source = temporary.substr(0, temporary.rfind('.')) + ".cpp";
  std::rename(temporary_source.c_str(), (cache_directory_ + "/objects/" + key + ".cpp").c_str());
  if (std::rename(temporary.c_str(), final_path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    return Status::error("cannot store the kernel object " + final_path + ": " + std::strerror(errno));
  }
  note_stored(final_path);
  return Status();
}

Status KernelCompiler::check_library(const std::string& source_hash, const SourceProvider& provide_source,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> selection = {"-DETM_CPU_ALL_KERNELS=1", "-DETM_CPU_KERNEL_INDEX=-1"};
  selection.insert(selection.end(), extra.begin(), extra.end());
  const std::string marker = cache_directory_ + "/checks/" + key_for(source_hash, selection);
  if (file_exists(marker)) {
    mark_cache_entry_used(marker);
    return Status();
  }
  std::string source;
  Status status = provide_source(&source);
  if (!status.ok()) return status;
  status = run_compiler(source, selection, true, "");
  if (!status.ok()) return status;
  const std::string temporary = marker + "." + unique_suffix();
  if (write_file(temporary, "", 0)) std::rename(temporary.c_str(), marker.c_str());
  return Status();
}

}  // namespace etm::device::cpu
