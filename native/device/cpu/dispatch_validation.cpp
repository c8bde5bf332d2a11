#include "device/cpu/dispatch_validation.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "device/cpu/cpu_executor.h"
#include "device/cpu/kernel_support/etm_cpu_threadgroup_checks.h"
#include "device/cpu/msl_translator.h"
#include "device/settings.h"
#include "device/tls_model.h"

extern char** environ;

namespace etm::device::cpu {
namespace {

// Around a buffer's bytes the CPU device maps nothing else for far more than this (its
// guard zones), so an address this close to a binding that is in no binding belongs to the
// binding's own buffer.
constexpr uint64_t kDeviceReach = 4096;
// set_bytes data is checked in copies spaced this far apart.
constexpr uint64_t kConstantPadding = 256;
// Reports kept word for word; the others are counted.
constexpr size_t kReportsKept = 8;

using etm_cpu_checks::Finding;
using etm_cpu_checks::kInRun;
using etm_cpu_checks::kMaxRun;
using etm_cpu_checks::kNoThread;
using etm_cpu_checks::kSeveralThreads;
using etm_cpu_checks::kUntouched;
using etm_cpu_checks::ShadowByte;
using etm_cpu_checks::copy_bytes;
using etm_cpu_checks::note_write;
using etm_cpu_checks::same_bytes;

// The bytes of ShadowByte that hold its state (no padding among them).
constexpr size_t kShadowStateBytes = offsetof(ShadowByte, several_readers) + sizeof(uint8_t);
bool same_state(const ShadowByte& a, const ShadowByte& b) { return std::memcmp(&a, &b, kShadowStateBytes) == 0; }

const char* verb(uint32_t kind, bool past) {
  if (kind == ETM_CPU_ACCESS_LOAD) return past ? "read" : "reads";
  if (kind == ETM_CPU_ACCESS_STORE) return past ? "wrote" : "writes";
  return past ? "updated atomically" : "updates atomically";
}

// "library.metal:LINE" of the kernel code at `site` (a return address), from the kernel
// object's line tables through addr2line; empty when they cannot tell.
std::string msl_line_of(uintptr_t site) {
  Dl_info info;
  if (!site || !dladdr(reinterpret_cast<void*>(site), &info) || !info.dli_fname) return "";
  char offset[32];
  std::snprintf(offset, sizeof offset, "0x%llx",
                static_cast<unsigned long long>(site - 1 - reinterpret_cast<uintptr_t>(info.dli_fbase)));
  int out[2];
  if (pipe(out) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string object = info.dli_fname;
  char tool[] = "addr2line", inlined[] = "-i", executable[] = "-e";
  char* argv[] = {tool, inlined, executable, object.data(), offset, nullptr};
  pid_t child = -1;
  const bool spawned = posix_spawnp(&child, "addr2line", &actions, nullptr, argv, environ) == 0;
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; spawned && (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  if (spawned) waitpid(child, nullptr, 0);
  // With -i the innermost inlined frame comes first; the MSL source is the first line from it.
  const std::string name = std::string(kMslSourceName) + ":";
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const size_t at = line.rfind(name);
    if (at != std::string::npos && (at == 0 || line[at - 1] == '/')) {
      const std::string location = line.substr(at);
      const size_t discriminator = location.find(' ');
      return location.substr(0, discriminator);
    }
    start = end + 1;
  }
  return "";
}

std::string bytes_text(uint64_t size) { return std::to_string(size) + (size == 1 ? " byte" : " bytes"); }

}  // namespace

// The group the calling worker runs now, and what its threads did to its threadgroup memory
// (the part the kernel's inline checks share first, pointing into the storage here). A group
// that runs as barrier regions passes its barriers together and reports them here (on fibers
// the executor keeps each thread's count).
struct WorkerShadow : etm_cpu_checks::WorkerChecks {
  DispatchValidation* owner = nullptr;
  const etm_cpu_group* group = nullptr;
  std::vector<ShadowByte> byte_storage;
  std::vector<uint8_t> run_storage;
  std::vector<unsigned char> value_storage;
  std::vector<uint32_t> simd_sync_storage;
  // The thread and code of the pending store's race (WorkerChecks::pending_race_other):
  // storing the value another thread stored (every thread of a group clearing one flag, as
  // Inductor's reductions do) loses nothing. A store after another thread's read is reported
  // at once.
  uint32_t pending_race_thread = kNoThread;
  uintptr_t pending_race_site = 0;
  bool reported_partial_barrier = false;

  WorkerShadow() : etm_cpu_checks::WorkerChecks{} { pending_race_other = kNoThread; }

  // Gives every byte of [begin, end) its own state again.
  void split_runs(uint64_t begin, uint64_t end) {
    uint64_t k = begin;
    while (k > 0 && run_length[k] == kInRun) --k;  // the first byte of the run holding `begin`
    for (; k < end; ++k) {
      const uint8_t length = run_length[k];
      if (length == kUntouched) {
        bytes[k] = ShadowByte{};
        run_length[k] = 0;
      }
      if (length == 0 || length == kInRun || length == kUntouched) continue;
      for (uint64_t j = k + 1; j < k + length; ++j) {
        bytes[j] = bytes[k];
        run_length[j] = 0;
      }
      run_length[k] = 0;
    }
  }

  void settle_pending() {
    copy_bytes(values + pending_begin, group->arena + pending_begin, pending_end - pending_begin);
    pending_begin = pending_end = 0;
  }
};

namespace {
// The calling worker's shadow, made by its first group and kept for the thread's life. Every
// check reads the plain pointer: one thread-local load, no initialisation guard.
ETM_THREAD_LOCAL WorkerShadow* tl_shadow = nullptr;
ETM_THREAD_LOCAL std::unique_ptr<WorkerShadow> tl_shadow_storage;

// The worker's record from what the kernel holds (etm_cpu_validation::worker's result).
WorkerShadow* shadow_of(void* worker) {
  return static_cast<WorkerShadow*>(static_cast<etm_cpu_checks::WorkerChecks*>(worker));
}

// ETMETAL_VALIDATE_REPORTS=<file>: each failed dispatch's message is appended there too, so a
// sweep counts the reports of child processes, whose output their parent may not show.
void append_to_report_file(const std::string& message) {
  std::string path;
  if (!settings::read_text("ETMETAL_VALIDATE_REPORTS", &path).ok() || path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string entry = message + "\n";
  // One write: O_APPEND keeps the entries of concurrent processes whole. A failed one loses
  // nothing the dispatch's error does not carry.
  [[maybe_unused]] const ssize_t written = ::write(fd, entry.data(), entry.size());
  ::close(fd);
}
}  // namespace

bool validation_enabled() {
  static const bool enabled = [] {
    std::string value;  // the runtime reports an invalid value when it starts
    return settings::read_choice("ETMETAL_VALIDATE", &value).ok() && value == "1";
  }();
  return enabled;
}

DispatchValidation::DispatchValidation(const std::string& kernel, const DispatchArgs& args,
                                       const std::vector<std::pair<uint64_t, uint64_t>>* static_ranges,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& threadgroup_blocks,
                                       uint64_t threadgroup_bytes)
    : kernel_(kernel), buffers_(args.buffers), threadgroup_bytes_(threadgroup_bytes) {
  // Tables shorter than `buffers` (a host that builds DispatchArgs itself) mean bound device
  // memory of unknown length, as CpuPipeline::execute reads them.
  const auto is_device_memory = [&](size_t i) { return i >= args.device_memory.size() || args.device_memory[i]; };
  const auto bound_length = [&](size_t i) { return i < args.buffer_lengths.size() ? args.buffer_lengths[i] : 0; };
  // set_bytes data moves into one block, each copy with unused padding on both sides.
  size_t constant_bytes = kConstantPadding;
  for (size_t i = 0; i < args.buffers.size(); ++i) {
    if (args.buffers[i] && !is_device_memory(i)) constant_bytes += (bound_length(i) + 15) / 16 * 16 + kConstantPadding;
  }
  constant_copies_.assign(constant_bytes, 0);
  size_t next_copy = kConstantPadding;
  for (size_t i = 0; i < args.buffers.size(); ++i) {
    if (!args.buffers[i]) continue;
    Binding binding{reinterpret_cast<uintptr_t>(args.buffers[i]), bound_length(i), kDeviceReach,
                    static_cast<uint32_t>(i), is_device_memory(i)};
    if (!binding.device) {
      unsigned char* copy = constant_copies_.data() + next_copy;
      std::memcpy(copy, args.buffers[i], binding.length);
      buffers_[i] = copy;
      binding.begin = reinterpret_cast<uintptr_t>(copy);
      binding.reach = kConstantPadding;
      next_copy += (binding.length + 15) / 16 * 16 + kConstantPadding;
    }
    bindings_.push_back(binding);
  }

  std::vector<uint8_t> valid(threadgroup_bytes, 0);
  auto mark = [&](uint64_t begin, uint64_t end) {
    std::fill(valid.begin() + static_cast<ptrdiff_t>(std::min(begin, threadgroup_bytes_)),
              valid.begin() + static_cast<ptrdiff_t>(std::min(end, threadgroup_bytes_)), 1);
  };
  if (static_ranges) {
    for (const auto& range : *static_ranges) mark(range.first, range.second);
  } else {
    mark(0, threadgroup_blocks.empty() ? threadgroup_bytes : threadgroup_blocks.front().first);
  }
  for (const auto& block : threadgroup_blocks) mark(block.first, block.second);
  valid_end_.assign(threadgroup_bytes, 0);
  for (uint64_t k = threadgroup_bytes; k-- > 0;) {
    if (valid[k]) valid_end_[k] = k + 1 < threadgroup_bytes && valid[k + 1] ? valid_end_[k + 1] : static_cast<uint32_t>(k + 1);
  }

  for (const Binding& binding : bindings_)
    ranges_.push_back(etm_cpu_range{binding.begin, binding.length, binding.reach});
  table_.threadgroup_span = kThreadgroupMemoryLimit + kValidationArenaSlack;
  table_.state = this;
  table_.check = &DispatchValidation::check;
  table_.worker = &DispatchValidation::worker;
  table_.check_threadgroup = &DispatchValidation::check_threadgroup_access;
  table_.barrier = &DispatchValidation::pass_barrier;
  table_.simd_sync = &DispatchValidation::pass_simd_sync;
  allow_reads(buffers_.data(), buffers_.size() * sizeof(void*));
}

void DispatchValidation::allow_reads(const void* data, uint64_t length) {
  ranges_.push_back(etm_cpu_range{reinterpret_cast<uintptr_t>(data), length, 0});
  table_.ranges = ranges_.data();
  table_.range_count = static_cast<uint32_t>(ranges_.size());
}

void DispatchValidation::begin_group(const etm_cpu_group& group) {
  if (!tl_shadow) {
    tl_shadow_storage = std::make_unique<WorkerShadow>();
    tl_shadow = tl_shadow_storage.get();
  }
  WorkerShadow& shadow = *tl_shadow;
  shadow.owner = this;
  shadow.group = &group;
  shadow.byte_storage.resize(threadgroup_bytes_);  // the states of untouched bytes are not read
  shadow.run_storage.assign(threadgroup_bytes_, kUntouched);
  shadow.value_storage.assign(group.arena, group.arena + threadgroup_bytes_);
  shadow.simd_sync_storage.assign(group.thread_count, 0);
  shadow.bytes = shadow.byte_storage.data();
  shadow.run_length = shadow.run_storage.data();
  shadow.values = shadow.value_storage.data();
  shadow.valid_end = valid_end_.data();
  shadow.threadgroup_bytes = threadgroup_bytes_;
  shadow.simd_syncs = shadow.simd_sync_storage.data();
  shadow.thread_count = group.thread_count;
  shadow.barriers = 0;
  shadow.pending_begin = shadow.pending_end = 0;
  shadow.pending_race_other = kNoThread;
  shadow.reported_partial_barrier = false;
}

// Where the running thread is: told by the kernel's loops (`thread`), else by the executor.
void DispatchValidation::locate_thread(const WorkerShadow& shadow, uint32_t thread, uint32_t* index,
                                       uint32_t* barriers, uint32_t* syncs) {
  if (thread != ETM_CPU_THREAD_UNKNOWN && thread < shadow.thread_count) {
    *index = thread;
    *barriers = shadow.barriers;
    *syncs = shadow.simd_syncs[thread];
    return;
  }
  *index = kNoThread;
  *barriers = *syncs = 0;
  current_kernel_thread(index, barriers, syncs);
}

void DispatchValidation::pass_barrier(void* state, uint32_t live) {
  auto* self = static_cast<DispatchValidation*>(state);
  WorkerShadow* current = tl_shadow;
  if (!current || current->owner != self || !current->group) return;
  WorkerShadow& shadow = *current;
  const uint32_t count = shadow.group->thread_count;
  self->released_in(shadow, live, shadow.reported_partial_barrier ? 0 : count - live);
  shadow.reported_partial_barrier = shadow.reported_partial_barrier || live != count;
  ++shadow.barriers;
}

void DispatchValidation::pass_simd_sync(void* worker, uint32_t first, uint64_t lanes) {
  WorkerShadow* shadow = shadow_of(worker);
  if (!shadow || !shadow->group) return;
  for (; lanes; lanes &= lanes - 1) {
    const uint64_t thread = first + static_cast<uint64_t>(__builtin_ctzll(lanes));
    if (thread < shadow->thread_count) ++shadow->simd_sync_storage[thread];
  }
}

std::string DispatchValidation::thread_text(const etm_cpu_group& group, uint32_t thread) const {
  if (thread == kNoThread) return "a thread of threadgroup (" + std::to_string(group.position[0]) + ", " +
                                   std::to_string(group.position[1]) + ", " + std::to_string(group.position[2]) + ")";
  const uint32_t local[3] = {thread % group.size[0], (thread / group.size[0]) % group.size[1],
                             thread / (group.size[0] * group.size[1])};
  std::string text = "thread (";
  for (int axis = 0; axis < 3; ++axis)
    text += std::to_string(group.origin[axis] + local[axis]) + (axis < 2 ? ", " : ")");
  text += " (threadgroup (";
  for (int axis = 0; axis < 3; ++axis)
    text += std::to_string(group.position[axis]) + (axis < 2 ? ", " : "), position (");
  for (int axis = 0; axis < 3; ++axis) text += std::to_string(local[axis]) + (axis < 2 ? ", " : ") in it)");
  return text;
}

void DispatchValidation::report(const std::string& what, const etm_cpu_group* group, uint32_t thread,
                                uintptr_t site) {
  const std::string text = group ? thread_text(*group, thread) + " " + what : what;
  std::lock_guard<std::mutex> lock(mutex_);
  ++report_count_;
  if (reports_.size() < kReportsKept &&
      std::none_of(reports_.begin(), reports_.end(), [&](const Report& r) { return r.text == text; }))
    reports_.push_back(Report{text, site});
}

void DispatchValidation::check(void* state, uintptr_t address, uint64_t size, uint32_t kind, uintptr_t site,
                               uint32_t running) {
  auto* self = static_cast<DispatchValidation*>(state);
  // Accesses inside a binding never get here, nor most that are far from every binding, nor
  // threadgroup memory's: the kernel settles them or hands them to check_threadgroup_access
  // (etm_cpu_counters.h).
  WorkerShadow* shadow = tl_shadow;
  if (!shadow || shadow->owner != self || !shadow->group) return;
  self->check_device(*shadow, address, size, kind, site, running);
}

void* DispatchValidation::worker(void* state) {
  WorkerShadow* shadow = tl_shadow;
  return shadow && shadow->owner == state ? static_cast<etm_cpu_checks::WorkerChecks*>(shadow) : nullptr;
}

void DispatchValidation::check_threadgroup_access(void* worker, uint64_t offset, uint64_t size, uint32_t kind,
                                                  uintptr_t site, uint32_t running) {
  WorkerShadow* shadow = shadow_of(worker);
  if (shadow && shadow->group) shadow->owner->check_threadgroup(*shadow, offset, size, kind, site, running);
}

void DispatchValidation::check_device(WorkerShadow& shadow, uintptr_t address, uint64_t size, uint32_t kind,
                                      uintptr_t site, uint32_t running) {
  const Binding* nearest = nullptr;
  uint64_t nearest_distance = UINT64_MAX;
  for (const Binding& binding : bindings_) {
    const auto signed_offset = static_cast<int64_t>(address - binding.begin);
    const uint64_t distance = signed_offset < 0 ? static_cast<uint64_t>(-signed_offset)
                                                : static_cast<uint64_t>(signed_offset) + size - binding.length;
    if (distance <= binding.reach && distance < nearest_distance) {
      nearest = &binding;
      nearest_distance = distance;
    }
  }
  if (!nearest) return;  // the stack, the kernel's constants, the executor's exchange data
  uint32_t thread = kNoThread, barriers = 0, syncs = 0;
  locate_thread(shadow, running, &thread, &barriers, &syncs);
  const auto offset = static_cast<int64_t>(address - nearest->begin);
  report(std::string(verb(kind, false)) + " " + bytes_text(size) + " at byte offset " + std::to_string(offset) +
             " of buffer " + std::to_string(nearest->index) + ", out of bounds (" +
             (nearest->device ? "" : "set_bytes data, ") + bytes_text(nearest->length) + " bound)",
         shadow.group, thread, site);
}

// Stores no hook saw (those of a call to memcpy or memset) show as changed bytes.
// No thread switch happens inside a basic block, so the change is the last accessor's, in its
// epoch then.
void DispatchValidation::settle_pending_store(WorkerShadow& shadow) {
  const uint64_t begin = shadow.pending_begin, size = shadow.pending_end - shadow.pending_begin;
  if (shadow.pending_race_other != kNoThread && size > 0 &&
      !same_bytes(shadow.values + begin, shadow.group->arena + begin, size))
    report_race(*shadow.group, begin, size, ETM_CPU_ACCESS_STORE, shadow.pending_race_thread, shadow.pending_race_other,
                "wrote", false, shadow.pending_race_site);
  shadow.pending_race_other = kNoThread;
  shadow.settle_pending();
}

void DispatchValidation::infer_writes(WorkerShadow& shadow, uint64_t begin, uint64_t end) {
  const unsigned char* arena = shadow.group->arena;
  unsigned char* values = shadow.values;
  // The last checked store has happened: the bytes it changed are its own.
  settle_pending_store(shadow);
  // Racing bytes in a row with the same writer, partner and kind make one report.
  uint64_t run_begin = 0, run_end = 0;
  uint32_t run_writer = kNoThread, run_other = kNoThread;
  bool run_wrote = false;
  auto flush = [&] {
    if (run_end > run_begin)
      report_race(*shadow.group, run_begin, run_end - run_begin, ETM_CPU_ACCESS_STORE, run_writer, run_other,
                  run_wrote ? "wrote" : "read", true, 0);
    run_begin = run_end = 0;
  };
  for (uint64_t k = begin; k < end; ++k) {
    // Unchanged bytes, eight at a time.
    uint64_t now, seen;
    if (k + 8 <= end) {
      std::memcpy(&now, arena + k, 8);
      std::memcpy(&seen, values + k, 8);
      if (now == seen) {
        k += 7;
        continue;
      }
    }
    if (values[k] == arena[k]) continue;
    values[k] = arena[k];
    if (shadow.run_length[k] != 0) shadow.split_runs(k, k + 1);
    ShadowByte& s = shadow.bytes[k];
    if (!s.last_epoch) continue;
    const bool written_by_other = s.write_epoch == s.last_epoch && s.writer != s.last_thread;
    const uint32_t writer = s.last_thread;
    const uint32_t racing = note_write(s, s.last_thread, s.last_epoch, s.last_syncs);
    if (racing == kNoThread) continue;
    if (run_end != k || writer != run_writer || racing != run_other || written_by_other != run_wrote) {
      flush();
      run_begin = k;
      run_writer = writer;
      run_other = racing;
      run_wrote = written_by_other;
    }
    run_end = k + 1;
  }
  flush();
}

__attribute__((noinline, cold)) void DispatchValidation::report_race(const etm_cpu_group& group, uint64_t offset, uint64_t size, uint32_t kind,
                                     uint32_t thread, uint32_t other, const char* other_did, bool inferred,
                                     uintptr_t site) {
  const std::string who = other == kSeveralThreads ? std::string("other threads") : thread_text(group, other);
  report(std::string(verb(kind, false)) + (inferred ? " (an update seen by its effect) " : " ") + bytes_text(size) +
             " at threadgroup memory offset " + std::to_string(offset) + ", which " + who + " " + other_did +
             " since the last threadgroup_barrier (a data race)",
         &group, thread, site);
}

void DispatchValidation::check_threadgroup(WorkerShadow& shadow, uint64_t offset, uint64_t size, uint32_t kind,
                                           uintptr_t site, uint32_t running) {
  uint32_t thread = kNoThread, barriers = 0, syncs = 0;
  locate_thread(shadow, running, &thread, &barriers, &syncs);
  const uint64_t valid_end = offset < threadgroup_bytes_ ? valid_end_[offset] : 0;
  if (valid_end <= offset || size > valid_end - offset) {
    report_threadgroup(shadow, offset, size, kind, thread, site,
                       ", outside every threadgroup variable and [[threadgroup(i)]] block");
    return;
  }
  // Bytes the access covers that changed since the checks last saw them were written by code
  // the compiler did not instrument (the last checked store's own bytes are settled first).
  settle_pending_store(shadow);
  if (!same_bytes(shadow.values + offset, shadow.group->arena + offset, size))
    infer_writes(shadow, offset, offset + size);
  if (kind != ETM_CPU_ACCESS_LOAD) {
    shadow.pending_begin = offset;
    shadow.pending_end = offset + size;
  }
  if (thread == kNoThread) return;
  const uint32_t epoch = barriers + 1;
  const auto me = static_cast<uint16_t>(thread);
  Finding finding;
  ShadowByte* bytes = shadow.bytes + offset;
  uint8_t* run = shadow.run_length + offset;
  if (size > 1 && run[0] == size) {
    etm_cpu_checks::visit(bytes[0], me, epoch, syncs, kind, finding);  // the element's run: one state for its bytes
  } else {
    shadow.split_runs(offset, offset + size);
    // Bytes in one state before the access are in one state after it (and add no finding the
    // first byte does not): they become a run.
    bool uniform = size > 1 && size <= kMaxRun;
    for (uint64_t k = 1; uniform && k < size; ++k) uniform = same_state(bytes[k], bytes[0]);
    if (uniform) {
      etm_cpu_checks::visit(bytes[0], me, epoch, syncs, kind, finding);
      run[0] = static_cast<uint8_t>(size);
      std::memset(run + 1, kInRun, size - 1);
    } else {
      for (uint64_t k = 0; k < size; ++k) etm_cpu_checks::visit(bytes[k], me, epoch, syncs, kind, finding);
    }
  }
  if (finding.uninitialised) {
    report_threadgroup(shadow, offset, size, kind, thread, site, " that no thread of the group has written (uninitialised)");
  } else if (finding.other != kNoThread && kind == ETM_CPU_ACCESS_STORE && finding.other_wrote) {
    shadow.pending_race_other = finding.other;
    shadow.pending_race_thread = thread;
    shadow.pending_race_site = site;
  } else if (finding.other != kNoThread) {
    report_race(*shadow.group, offset, size, kind, thread, finding.other, finding.other_wrote ? "wrote" : "read", false,
                site);
  }
}

// Reporting is rare: kept out of line, so the checks' own code stays small.
__attribute__((noinline, cold)) void DispatchValidation::report_threadgroup(const WorkerShadow& shadow, uint64_t offset, uint64_t size, uint32_t kind,
                                            uint32_t thread, uintptr_t site, const char* problem) {
  report(std::string(verb(kind, false)) + " " + bytes_text(size) + " at threadgroup memory offset " +
             std::to_string(offset) + problem,
         shadow.group, thread, site);
}

void DispatchValidation::barrier_released(const etm_cpu_group& group, uint32_t released, uint32_t finished) {
  WorkerShadow* shadow = tl_shadow;
  if (shadow && shadow->owner == this && shadow->group == &group) released_in(*shadow, released, finished);
}

void DispatchValidation::released_in(WorkerShadow& shadow, uint32_t released, uint32_t finished) {
  const etm_cpu_group& group = *shadow.group;
  infer_writes(shadow, 0, threadgroup_bytes_);
  if (finished == 0) return;
  const std::string what = "threadgroup_barrier reached by " + std::to_string(released) + " of the " +
                           std::to_string(group.thread_count) + " threads of threadgroup (" +
                           std::to_string(group.position[0]) + ", " + std::to_string(group.position[1]) +
                           ", " + std::to_string(group.position[2]) + "); " + std::to_string(finished) +
                           " returned without reaching it";
  report(what, nullptr, kNoThread, 0);
}

void DispatchValidation::end_group() {
  WorkerShadow* shadow = tl_shadow;
  if (shadow && shadow->owner == this && shadow->group) infer_writes(*shadow, 0, threadgroup_bytes_);
}

Status DispatchValidation::outcome(const Status& executed) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reports_.empty()) return executed;
  std::string message = "kernel '" + kernel_ + "': ETMETAL_VALIDATE found " + std::to_string(report_count_) +
                        (report_count_ == 1 ? " problem:" : " problems:");
  for (const Report& r : reports_) {
    const std::string line = msl_line_of(r.site);
    message += "\n  " + r.text + (line.empty() ? "" : " at " + line);
  }
  if (report_count_ > reports_.size())
    message += "\n  (" + std::to_string(report_count_ - reports_.size()) + " more not shown)";
  if (!executed.ok()) message += "\nthen: " + executed.message();
  append_to_report_file(message);
  return Status::error(message);
}

}  // namespace etm::device::cpu
