// The CPU device's MTLLibrary and MTLComputePipelineState: MSL source is translated once;
// each kernel is built into its own shared object when a pipeline asks for it (a library
// with a single kernel builds it at once, which also reports compile errors; a larger one
// is checked with -fsyntax-only first).
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "device/cpu/cpu_executor.h"
#include "device/cpu/cpu_pipeline.h"
#include "device/cpu/dispatch_counters.h"
#include "device/cpu/dispatch_overlap.h"
#include "device/cpu/dispatch_validation.h"
#include "device/cpu/kernel_compiler.h"
#include "device/cpu/kernel_faults.h"
#include "device/cpu/msl_barrier_regions.h"
#include "device/cpu/msl_translator.h"
#include "device/settings.h"

namespace etm::device::cpu {
namespace {

// How kernels run: decided per kernel (a plain loop when its object calls no lane function,
// else its barrier-region form when the translator made one, else fibers), unless
// ETMETAL_CPU_EXECUTION forces one path ("loop", "fibers", or "regions" where a kernel has
// that form) for testing. ETMETAL_LOG=debug prints each kernel's path and why.
enum class ExecutionChoice { automatic, loop, fibers, regions };

ExecutionChoice execution_choice() {
  std::string value;  // the runtime reports an invalid value when it starts
  if (!settings::read_choice("ETMETAL_CPU_EXECUTION", &value).ok()) return ExecutionChoice::automatic;
  if (value == "loop") return ExecutionChoice::loop;
  if (value == "fibers") return ExecutionChoice::fibers;
  if (value == "regions") return ExecutionChoice::regions;
  return ExecutionChoice::automatic;
}

bool debug_logging() {
  std::string value;
  return settings::read_choice("ETMETAL_LOG", &value).ok() && value == "debug";
}

// Fills a table of executor calls that a kernel object exports (etm_lane.h), unless `first`
// shows it filled: dlopen hands every load of one file the same object, and kernels of an
// earlier load may be reading the table.
template <class Table, class Entry>
void fill_exported_table(Table* table, Entry Table::*first, const Table& calls) {
  static std::mutex fill_mutex;
  std::lock_guard<std::mutex> lock(fill_mutex);
  if (!(table->*first)) *table = calls;
}

// Marks kernel objects built without their barrier-region form (it did not compile).
const char kWithoutRegions[] = "-DETM_CPU_NO_REGIONS=1";

// One kernel's loaded object. It is never dlclose'd: libraries are often deleted from a model
// library's static destructors while the process exits, and unloading an object from there
// lets glibc unmap code that is still running. A kernel object is small and cached on disk.
class KernelObject {
 public:
  static Status load(const std::string& path, const TranslatedKernel& kernel,
                     std::shared_ptr<KernelObject>* out) {
    auto object = std::shared_ptr<KernelObject>(new KernelObject());
    object->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!object->handle_) {
      const char* why = ::dlerror();
      return Status::error("cannot load the compiled kernel '" + kernel.name + "': " + (why ? why : path));
    }
    register_kernel_code(object->handle_);  // integer division faults return values, as on a GPU
    const std::string n = std::to_string(kernel.entry_index);
    object->loop_ = reinterpret_cast<etm_cpu_loop_entry>(::dlsym(object->handle_, ("etm_kernel_loop_" + n).c_str()));
    object->thread_ =
        reinterpret_cast<etm_cpu_thread_entry>(::dlsym(object->handle_, ("etm_kernel_thread_" + n).c_str()));
    auto sizes = reinterpret_cast<etm_cpu_argument_sizes_entry>(
        ::dlsym(object->handle_, ("etm_kernel_argument_sizes_" + n).c_str()));
    auto static_bytes = reinterpret_cast<etm_cpu_static_threadgroup_bytes_entry>(
        ::dlsym(object->handle_, "etm_kernel_static_threadgroup_bytes"));
    if (!object->loop_ || !object->thread_ || !sizes || !static_bytes) {
      return Status::error("the compiled object of kernel '" + kernel.name + "' lacks its entry points");
    }
    object->argument_sizes_.assign(kernel.arguments.size(), 0);
    sizes(object->argument_sizes_.data());
    object->static_threadgroup_bytes_ = static_bytes();
    // Objects built with access checks list their static threadgroup variables.
    auto static_ranges = reinterpret_cast<etm_cpu_static_threadgroup_ranges_entry>(
        ::dlsym(object->handle_, "etm_kernel_static_threadgroup_ranges"));
    if (static_ranges) {
      const uint64_t* pairs = nullptr;
      const uint32_t count = static_ranges(&pairs);
      object->static_ranges_known_ = count != UINT32_MAX;
      for (uint32_t i = 0; object->static_ranges_known_ && i < count; ++i)
        object->static_ranges_.emplace_back(pairs[2 * i], pairs[2 * i + 1]);
    }
    auto running_dispatches = reinterpret_cast<etm_cpu_running_dispatches_entry>(
        ::dlsym(object->handle_, "etm_kernel_running_dispatches"));
    if (running_dispatches) object->running_dispatches_ = running_dispatches();
    // The compiler's value of a kernel's max_total_threads_per_threadgroup expression (0: none).
    const auto* max_threads = static_cast<const uint32_t*>(::dlsym(object->handle_, ("etm_kernel_max_threads_" + n).c_str()));
    object->max_threads_ = max_threads ? *max_threads : 0;

    // Kernel objects whose code calls a lane function define the table of lane calls; the
    // others run on the loop path.
    auto* lanes = static_cast<etm_cpu_lane_calls*>(::dlsym(object->handle_, "etm_cpu_lanes"));
    const bool needs_fibers = lanes != nullptr;
    object->needs_fibers_ = needs_fibers;
    if (lanes) fill_exported_table(lanes, &etm_cpu_lane_calls::threadgroup_barrier, executor_lane_calls());
    object->regions_ =
        reinterpret_cast<etm_cpu_regions_entry>(::dlsym(object->handle_, ("etm_kernel_regions_" + n).c_str()));
    const auto* note = static_cast<const char*>(::dlsym(object->handle_, ("etm_kernel_execution_note_" + n).c_str()));
    const ExecutionChoice choice = execution_choice();
    switch (choice) {
      case ExecutionChoice::automatic:
      case ExecutionChoice::regions: object->use_fibers_ = needs_fibers; break;
      case ExecutionChoice::loop: object->use_fibers_ = false; break;
      case ExecutionChoice::fibers: object->use_fibers_ = true; break;
    }
    const bool regions_allowed = choice == ExecutionChoice::regions || (choice == ExecutionChoice::automatic && needs_fibers);
    if (!regions_allowed) object->regions_ = nullptr;
    if (object->regions_) object->use_fibers_ = false;
    // Region forms that hand serial chains to the executor (etm_lane.h's group requests).
    auto* group_batch = static_cast<etm_cpu_group_calls*>(::dlsym(object->handle_, "etm_cpu_group_batch"));
    if (group_batch) fill_exported_table(group_batch, &etm_cpu_group_calls::await_request, executor_group_calls());
    object->batches_groups_ = object->regions_ && group_batch;
    if (debug_logging()) {
      const char* path = object->regions_ ? "barrier regions" : object->use_fibers_ ? "fibers" : "loop";
      std::string why;
      if (!object->regions_ && needs_fibers) {
        why = note && std::strcmp(note, "barrier regions") != 0 ? note : "its region form did not compile";
        if (choice == ExecutionChoice::fibers || choice == ExecutionChoice::loop) why = "ETMETAL_CPU_EXECUTION";
      }
      std::fprintf(stderr, "etmetal debug: kernel '%s' runs as %s%s%s\n", kernel.name.c_str(), path,
                   why.empty() ? "" : ": ", why.c_str());
    }
    *out = std::move(object);
    return Status();
  }

  etm_cpu_loop_entry loop() const { return loop_; }
  etm_cpu_thread_entry thread() const { return thread_; }
  etm_cpu_regions_entry regions() const { return regions_; }
  bool batches_groups() const { return batches_groups_; }
  bool use_fibers() const { return use_fibers_; }
  // The kernel calls threadgroup_barrier or a SIMD-group function.
  bool needs_fibers() const { return needs_fibers_; }
  uint64_t static_threadgroup_bytes() const { return static_threadgroup_bytes_; }
  // What Metal would count: without the unused bytes validation puts after each variable.
  uint64_t metal_static_threadgroup_bytes() const {
    return static_threadgroup_bytes_ - (static_ranges_known_ ? kThreadgroupRedzoneBytes * static_ranges_.size() : 0);
  }
  // The static variables' [begin, end) offsets; null unless the object recorded them all.
  const std::vector<std::pair<uint64_t, uint64_t>>* static_threadgroup_ranges() const {
    return static_ranges_known_ ? &static_ranges_ : nullptr;
  }
  uint32_t max_threads() const { return max_threads_; }
  const std::vector<uint64_t>& argument_sizes() const { return argument_sizes_; }
  // The object's count of running dispatches (etm_cpu_kernel_abi.h); null unless it has one.
  uint32_t* running_dispatches() const { return running_dispatches_; }

 private:
  KernelObject() = default;
  void* handle_ = nullptr;
  etm_cpu_loop_entry loop_ = nullptr;
  etm_cpu_thread_entry thread_ = nullptr;
  etm_cpu_regions_entry regions_ = nullptr;  // null unless the kernel runs as barrier regions
  bool batches_groups_ = false;  // its groups run side by side (KernelDispatch::batches_groups)
  bool use_fibers_ = true;
  bool needs_fibers_ = true;
  uint64_t static_threadgroup_bytes_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> static_ranges_;
  bool static_ranges_known_ = false;
  uint32_t max_threads_ = 0;
  uint32_t* running_dispatches_ = nullptr;
  std::vector<uint64_t> argument_sizes_;
};

uint64_t align16(uint64_t n) { return (n + 15) / 16 * 16; }

class CpuKernelPipeline : public CpuPipeline {
 public:
  CpuKernelPipeline(const TranslatedKernel& kernel, std::shared_ptr<KernelObject> object, bool follows_stored_addresses)
      : kernel_(kernel),
        object_(std::move(object)),
        timeout_ms_(kernel_timeout_ms()),
        validating_(validation_enabled()),
        counting_(counters_enabled()),
        follows_stored_addresses_(follows_stored_addresses) {
    for (size_t k = 0; k < kernel_.arguments.size(); ++k) {
      const KernelArgument& a = kernel_.arguments[k];
      if (a.kind == KernelArgumentKind::buffer) {
        buffer_checks_.push_back({a.index, static_cast<uint32_t>(k), a.optional, object_->argument_sizes()[k]});
      }
      has_threadgroup_arguments_ = has_threadgroup_arguments_ || a.kind == KernelArgumentKind::threadgroup_memory;
      if (a.kind == KernelArgumentKind::buffer && a.writable && a.index < 32) written_buffers_ |= uint32_t{1} << a.index;
    }
  }

  const std::string& name() const override { return kernel_.name; }
  uint32_t max_total_threads_per_threadgroup() const override {
    if (kernel_.max_total_threads_per_threadgroup) return kernel_.max_total_threads_per_threadgroup;
    return object_->max_threads() ? object_->max_threads() : kMaxThreadsPerThreadgroup;
  }
  uint32_t thread_execution_width() const override { return kSimdWidth; }
  size_t static_threadgroup_memory_length() const override { return object_->metal_static_threadgroup_bytes(); }
  // False where nothing bound is read or written.
  bool writes_buffer(uint32_t index) const override { return index < 32 && (written_buffers_ >> index & 1); }

  bool may_overlap(const Size3& grid, const Size3& threads_per_group) const override {
    return !follows_stored_addresses_ && !validating_ && !counting_ &&
           !spreads_over_workers(grid, threads_per_group, object_->use_fibers() || object_->regions());
  }

  Status execute(const DispatchArgs& args) override {
    const std::string& name = kernel_.name;
    const Size3& group = args.threads_per_group;
    const Size3& grid = args.grid;
    if (group.x == 0 || group.y == 0 || group.z == 0) {
      return Status::error("kernel '" + name + "': threadgroup size has a zero dimension");
    }
    if (group.volume() > max_total_threads_per_threadgroup()) {
      return Status::error("kernel '" + name + "': " + std::to_string(group.volume()) +
                           " threads per threadgroup exceed its maximum of " +
                           std::to_string(max_total_threads_per_threadgroup()));
    }
    for (uint64_t extent : {grid.x, grid.y, grid.z}) {
      if (extent > UINT32_MAX) return Status::error("kernel '" + name + "': grid dimension exceeds 2^32-1");
    }

    etm_cpu_launch launch{};
    const uint64_t groups[3] = {(grid.x + group.x - 1) / group.x, (grid.y + group.y - 1) / group.y,
                                (grid.z + group.z - 1) / group.z};
    const uint64_t per_group[3] = {group.x, group.y, group.z};
    const uint64_t threads[3] = {grid.x, grid.y, grid.z};
    for (int axis = 0; axis < 3; ++axis) {
      launch.groups[axis] = static_cast<uint32_t>(groups[axis]);
      launch.threads_per_group[axis] = static_cast<uint32_t>(per_group[axis]);
      launch.grid[axis] = static_cast<uint32_t>(threads[axis]);
    }

    // Arguments must be bound; references must have their whole value behind them.
    uint64_t threadgroup_bytes = align16(object_->static_threadgroup_bytes());
    uint32_t dynamic_offsets[kMaxArgumentIndex + 1];  // read only at the kernel's threadgroup indices
    // While validating each block is followed by unused bytes, which Metal's limit ignores.
    const uint64_t redzone = validating_ ? kThreadgroupRedzoneBytes : 0;
    uint64_t redzone_bytes = object_->static_threadgroup_bytes() - object_->metal_static_threadgroup_bytes();
    if (has_threadgroup_arguments_ || validating_) std::fill(std::begin(dynamic_offsets), std::end(dynamic_offsets), 0);
    std::vector<std::pair<uint64_t, uint64_t>> dynamic_blocks;
    size_t padded_size = 0;
    for (const BufferCheck& check : buffer_checks_) {
      const uint32_t index = check.index;
      if (index >= args.buffers.size() || !args.buffers[index]) {
        // A function-constant-conditional argument may be absent: the kernel gets null.
        if (check.optional) {
          if (index >= args.buffers.size()) padded_size = std::max<size_t>(padded_size, index + 1);
          continue;
        }
        return Status::error(argument_label(kernel_.arguments[check.argument]) + " (buffer " +
                             std::to_string(index) + ") is not bound");
      }
      if (check.needed && index < args.buffer_lengths.size() && args.buffer_lengths[index] < check.needed) {
        return Status::error(argument_label(kernel_.arguments[check.argument]) + " (buffer " +
                             std::to_string(index) + ") reads " + std::to_string(check.needed) +
                             " bytes, but only " + std::to_string(args.buffer_lengths[index]) + " are bound");
      }
    }
    for (size_t k = 0; has_threadgroup_arguments_ && k < kernel_.arguments.size(); ++k) {
      const KernelArgument& a = kernel_.arguments[k];
      if (a.kind == KernelArgumentKind::threadgroup_memory) {
        if (a.index > kMaxArgumentIndex) {
          return Status::error(argument_label(a) + ": threadgroup memory index " +
                               std::to_string(a.index) + " is out of range");
        }
        const uint64_t length =
            a.index < args.threadgroup_memory_lengths.size() ? args.threadgroup_memory_lengths[a.index] : 0;
        dynamic_offsets[a.index] = static_cast<uint32_t>(std::min<uint64_t>(threadgroup_bytes, kThreadgroupMemoryLimit));
        if (validating_) dynamic_blocks.emplace_back(threadgroup_bytes, threadgroup_bytes + length);
        threadgroup_bytes += align16(length) + redzone;
        redzone_bytes += redzone;
      }
    }
    if (threadgroup_bytes - redzone_bytes > kThreadgroupMemoryLimit) {
      return Status::error("kernel '" + name + "' uses " + std::to_string(threadgroup_bytes - redzone_bytes) +
                           " bytes of threadgroup memory (static " +
                           std::to_string(object_->metal_static_threadgroup_bytes()) + " + dynamic); the limit is " +
                           std::to_string(kThreadgroupMemoryLimit));
    }
    std::vector<void*> padded;  // the argument table, extended to unbound optional arguments
    if (padded_size > args.buffers.size()) {
      padded = args.buffers;
      padded.resize(padded_size, nullptr);
    }
    launch.buffers = padded.empty() ? args.buffers.data() : padded.data();
    launch.dynamic_threadgroup_offsets = dynamic_offsets;
    std::unique_ptr<DispatchCountingTable> counting;
    if (counting_) {
      counting = std::make_unique<DispatchCountingTable>(args);
      launch.counters = counting->counters();
    }
    std::unique_ptr<DispatchValidation> validation;
    if (validating_) {
      DispatchArgs checked = args;
      if (!padded.empty()) {
        checked.buffers = padded;
        checked.buffer_lengths.resize(padded.size(), 0);
        checked.device_memory.resize(padded.size(), 0);
      }
      validation = std::make_unique<DispatchValidation>(kernel_.name, checked, object_->static_threadgroup_ranges(),
                                                        dynamic_blocks, threadgroup_bytes);
      launch.buffers = validation->buffers();
      validation->allow_reads(dynamic_offsets, sizeof dynamic_offsets);
      launch.validation = validation->table();
    }

    KernelDispatch dispatch;
    dispatch.kernel_name = &kernel_.name;
    dispatch.loop_entry = object_->loop();
    dispatch.thread_entry = object_->thread();
    dispatch.use_fibers = object_->use_fibers();
    dispatch.regions_entry = object_->regions();
    dispatch.batches_groups = object_->batches_groups();
    dispatch.launch = launch;
    dispatch.threadgroup_bytes = threadgroup_bytes;
    dispatch.timeout_ms = timeout_ms_;
    dispatch.validation = validation.get();
    if (!validation && !counting) return execute_dispatch(dispatch);  // returned in place: no copy
    // Raised around the whole dispatch, not by each entry point: a fault abandons entry points
    // without returning through them, never this call.
    uint32_t* running = object_->running_dispatches();
    if (running) __atomic_fetch_add(running, 1, __ATOMIC_RELAXED);
    Status status = execute_dispatch(dispatch);
    if (running) __atomic_fetch_sub(running, 1, __ATOMIC_RELAXED);
    if (validation) status = validation->outcome(status);
    if (status.ok() && counting) {
      counting->record(kernel_.name, grid.volume(), groups[0] * groups[1] * groups[2]);
    }
    return status;
  }

 private:
  // Metal's argument tables have 31 entries.
  static constexpr uint32_t kMaxArgumentIndex = 30;

  std::string argument_label(const KernelArgument& a) const {
    return "kernel '" + kernel_.name + "' argument '" + a.name + "'";
  }

  TranslatedKernel kernel_;
  std::shared_ptr<KernelObject> object_;
  // The buffer arguments' checks, from kernel_ and object_ once (every dispatch runs them).
  struct BufferCheck {
    uint32_t index;     // in the argument table
    uint32_t argument;  // in kernel_.arguments
    bool optional;
    uint64_t needed;    // bytes a reference argument reads (0: a pointer)
  };
  std::vector<BufferCheck> buffer_checks_;
  bool has_threadgroup_arguments_ = false;
  // Read when the pipeline is made: reading the environment costs ~900 instructions, an
  // eighth of a small dispatch.
  const uint64_t timeout_ms_;
  // The process's settings (ETMETAL_VALIDATE, ETMETAL_COUNTERS), kept here: a call each per
  // dispatch cost ~20 instructions.
  const bool validating_;
  const bool counting_;
  const bool follows_stored_addresses_;  // may_follow_stored_addresses of its library
  uint32_t written_buffers_ = 0;  // bit i: the kernel may write the buffer at index i
};

// Quotes the MSL line under each "library.metal:LINE:COLUMN:" diagnostic.
std::string with_source_lines(const std::string& message, const std::string& source) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = source.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(source.substr(start, end - start));
  }
  lines.push_back(source.substr(start));
  const std::string prefix = std::string(kMslSourceName) + ":";
  std::string out;
  size_t position = 0;
  while (position < message.size()) {
    size_t end = message.find('\n', position);
    if (end == std::string::npos) end = message.size();
    const std::string line = message.substr(position, end - position);
    out += line + "\n";
    if (line.rfind(prefix, 0) == 0 && line.find(": error:") != std::string::npos) {
      const unsigned long number = std::strtoul(line.c_str() + prefix.size(), nullptr, 10);
      if (number >= 1 && number <= lines.size()) {
        out += "  " + std::to_string(number) + " | " + lines[number - 1] + "\n";
      }
    }
    position = end + 1;
  }
  if (!out.empty()) out.pop_back();
  return out;
}

// What a library needs from its translation without the translated text: the kernels and
// the hash that names the translated source in the object cache. Kept as a small record in
// the cache, so creating a library whose objects are cached does not translate again.
struct LibraryDescription {
  std::string source_hash;
  std::vector<TranslatedKernel> kernels;
  std::vector<FunctionConstant> function_constants;
};

// Records are text: one field per line, names length-prefixed ("5:hello").
std::string serialize(const LibraryDescription& d) {
  std::ostringstream out;
  out << msl_translator_identity() << "\n" << d.source_hash << "\n" << d.kernels.size() << "\n";
  for (const TranslatedKernel& k : d.kernels) {
    out << k.name.size() << ":" << k.name << " " << k.entry_index << " "
        << k.max_total_threads_per_threadgroup << " " << k.line << " " << k.arguments.size() << " "
        << k.execution_note.size() << ":" << k.execution_note << "\n";
    for (const KernelArgument& a : k.arguments) {
      out << a.name.size() << ":" << a.name << " " << static_cast<int>(a.kind) << " " << a.index << " "
          << a.by_reference << " " << a.writable << " " << a.optional << " " << a.attribute.size() << ":"
          << a.attribute << " " << a.type.size() << ":" << a.type << " " << a.address_space.size() << ":"
          << a.address_space << "\n";
    }
  }
  out << d.function_constants.size() << "\n";
  for (const FunctionConstant& c : d.function_constants) {
    out << c.name.size() << ":" << c.name << " " << c.index << " " << c.type.size() << ":" << c.type << "\n";
  }
  return out.str();
}

bool read_counted(std::istream& in, std::string* text) {
  size_t length = 0;
  char colon = 0;
  if (!(in >> length >> colon) || colon != ':' || length > 4096) return false;
  text->resize(length);
  return length == 0 || static_cast<bool>(in.read(&(*text)[0], static_cast<std::streamsize>(length)));
}

bool deserialize(const std::string& text, LibraryDescription* d) {
  std::istringstream in(text);
  std::string version;
  size_t kernel_count = 0;
  if (!std::getline(in, version) || version != msl_translator_identity()) return false;
  if (!(in >> d->source_hash >> kernel_count) || kernel_count > 100000) return false;
  d->kernels.resize(kernel_count);
  for (TranslatedKernel& k : d->kernels) {
    size_t argument_count = 0;
    if (!read_counted(in, &k.name) ||
        !(in >> k.entry_index >> k.max_total_threads_per_threadgroup >> k.line >> argument_count) ||
        argument_count > 1000 || !read_counted(in, &k.execution_note)) {
      return false;
    }
    k.arguments.resize(argument_count);
    for (KernelArgument& a : k.arguments) {
      int kind = 0;
      if (!read_counted(in, &a.name) ||
          !(in >> kind >> a.index >> a.by_reference >> a.writable >> a.optional) ||
          !read_counted(in, &a.attribute) || !read_counted(in, &a.type) || !read_counted(in, &a.address_space) ||
          kind < 0 || kind > 2) {
        return false;
      }
      a.kind = static_cast<KernelArgumentKind>(kind);
    }
  }
  size_t constant_count = 0;
  if (!(in >> constant_count) || constant_count > 100000) return false;
  d->function_constants.resize(constant_count);
  for (FunctionConstant& c : d->function_constants) {
    if (!read_counted(in, &c.name) || !(in >> c.index) || !read_counted(in, &c.type)) return false;
  }
  return true;
}

class CpuLibrary : public Library {
 public:
  CpuLibrary(KernelCompiler* compiler, std::string msl, MslTranslationOptions options,
             LibraryDescription description, std::string translated)
      : compiler_(compiler),
        msl_(std::move(msl)),
        options_(options),
        description_(std::move(description)),
        translated_(std::move(translated)),
        follows_stored_addresses_(may_follow_stored_addresses(msl_)) {
    if (follows_stored_addresses_ && debug_logging() && !description_.kernels.empty()) {
      std::fprintf(stderr,
                   "etmetal debug: kernel '%s' and the others of its library never overlap other dispatches: "
                   "the library may follow device addresses stored in memory\n",
                   description_.kernels[0].name.c_str());
    }
  }

  const std::vector<TranslatedKernel>& kernels() const { return description_.kernels; }
  bool has_function_constants() const { return !description_.function_constants.empty(); }

  // The translated source, for building objects the cache does not have.
  Status translated_source(std::string* out) {
    if (translated_.empty()) {
      MslTranslation translation;
      Status status = translate_msl(msl_, options_, &translation);
      if (!status.ok()) return status;
      translated_ = std::move(translation.source);
    }
    *out = translated_;
    return Status();
  }

  Status check() {
    std::lock_guard<std::mutex> lock(mutex_);
    const KernelCompiler::SourceProvider source = [this](std::string* text) { return translated_source(text); };
    Status status = compiler_->check_library(description_.source_hash, source);
    if (status.ok()) return status;
    std::string text;
    // Region forms exist for kernel templates too, instantiated or not.
    if (!translated_source(&text).ok() || text.find("ETM_CPU_NO_REGIONS") == std::string::npos) return status;
    const Status without_regions = compiler_->check_library(description_.source_hash, source, {kWithoutRegions});
    if (without_regions.ok() && debug_logging() && !description_.kernels.empty()) {
      std::fprintf(stderr, "etmetal debug: the region forms of the library of kernel '%s' do not compile: %s\n",
                   description_.kernels[0].name.c_str(), with_source_lines(status.message(), msl_).c_str());
    }
    return without_regions;
  }

  // ETMETAL_LOG=debug: the kernels the translator gave no region form although they synchronise
  // (they run on fibers), and why.
  void log_declined_region_forms() const {
    if (!debug_logging()) return;
    for (const TranslatedKernel& kernel : description_.kernels) {
      if (has_region_form(kernel) || kernel.execution_note == kNoSynchronisation) continue;
      std::fprintf(stderr, "etmetal debug: kernel '%s' has no region form: %s\n", kernel.name.c_str(),
                   kernel.execution_note.c_str());
    }
  }

  static bool has_region_form(const TranslatedKernel& kernel) { return kernel.execution_note.empty(); }

  // Builds the kernel's object for these function constant flags (from the cache when it
  // is there) and loads it.
  Status load(const TranslatedKernel& kernel, const std::vector<std::string>& specialization,
              std::shared_ptr<KernelObject>* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_pair(kernel.entry_index, specialization);
    auto found = objects_.find(key);
    if (found != objects_.end()) {
      *out = found->second;
      return Status();
    }
    std::string path;
    const KernelCompiler::SourceProvider source = [this](std::string* text) { return translated_source(text); };
    Status status = compiler_->build_kernel(description_.source_hash, kernel.entry_index, specialization, source, &path);
    if (!status.ok() && has_region_form(kernel)) {
      // The region form is an optimisation: a kernel whose region form does not compile
      // runs on fibers (the retry reports the kernel's own errors, if any).
      const Status with_regions = status;
      std::vector<std::string> without_regions = specialization;
      without_regions.push_back(kWithoutRegions);
      status = compiler_->build_kernel(description_.source_hash, kernel.entry_index, without_regions, source, &path);
      if (status.ok() && debug_logging()) {
        std::fprintf(stderr, "etmetal debug: kernel '%s': its region form does not compile: %s\n", kernel.name.c_str(),
                     with_source_lines(with_regions.message(), msl_).c_str());
      }
    }
    if (!status.ok()) return status;
    status = KernelObject::load(path, kernel, out);
    if (!status.ok()) return status;
    // Metal's count: the guard bytes validation puts after each variable are not the kernel's.
    if ((*out)->metal_static_threadgroup_bytes() > kThreadgroupMemoryLimit) {
      return Status::error(std::string(kMslSourceName) + ":" + std::to_string(kernel.line) + ": kernel '" +
                           kernel.name + "' declares " +
                           std::to_string((*out)->metal_static_threadgroup_bytes()) +
                           " bytes of threadgroup memory; the limit is " + std::to_string(kThreadgroupMemoryLimit));
    }
    objects_[key] = *out;
    return Status();
  }

  Status new_pipeline(const std::string& kernel_name, std::shared_ptr<Pipeline>* out) override {
    return new_specialized_pipeline(kernel_name, {}, out);
  }

  Status new_specialized_pipeline(const std::string& kernel_name, const std::vector<FunctionConstantValue>& constants,
                                  std::shared_ptr<Pipeline>* out) override {
    std::vector<std::string> specialization;
    const Status specialized = function_constant_flags(description_.function_constants, constants, &specialization);
    if (!specialized.ok()) return Status::error("kernel '" + kernel_name + "': " + specialized.message());
    for (const TranslatedKernel& kernel : description_.kernels) {
      if (kernel.name != kernel_name) continue;
      std::shared_ptr<KernelObject> object;
      Status status = load(kernel, specialization, &object);
      if (!status.ok()) return Status::error(with_source_lines(status.message(), msl_));
      *out = std::make_shared<CpuKernelPipeline>(kernel, std::move(object), follows_stored_addresses_);
      return Status();
    }
    std::string names;
    for (const TranslatedKernel& kernel : description_.kernels) names += (names.empty() ? "" : ", ") + kernel.name;
    return Status::error("the shader library has no kernel named '" + kernel_name + "' (it has: " +
                         (names.empty() ? "no kernels" : names) + ")");
  }

 private:
  KernelCompiler* compiler_;
  const std::string msl_;
  const MslTranslationOptions options_;
  const LibraryDescription description_;
  std::string translated_;  // empty until needed
  const bool follows_stored_addresses_;  // its dispatches never overlap others
  std::mutex mutex_;
  // By entry index and function constant flags.
  std::map<std::pair<uint32_t, std::vector<std::string>>, std::shared_ptr<KernelObject>> objects_;
};

}  // namespace

Status compile_msl_library(const std::string& source, std::shared_ptr<Library>* out) {
  KernelCompiler* compiler = nullptr;
  Status status = KernelCompiler::get(&compiler);
  if (!status.ok()) return status;
  MslTranslationOptions options;
  options.suffix_float_literals = compiler->is_clang();

  const std::string record_key =
      content_hash(msl_translator_identity() + (options.suffix_float_literals ? "f" : "-") + source);
  LibraryDescription description;
  std::string translated;
  std::string record;
  if (!compiler->read_record("translations", record_key, &record) || !deserialize(record, &description)) {
    MslTranslation translation;
    status = translate_msl(source, options, &translation);
    if (!status.ok()) return Status::error("MSL translation failed: " + status.message());
    description.source_hash = content_hash(translation.source);
    description.kernels = std::move(translation.kernels);
    description.function_constants = std::move(translation.function_constants);
    translated = std::move(translation.source);
    compiler->write_record("translations", record_key, serialize(description));
  }
  auto library = std::make_shared<CpuLibrary>(compiler, source, options, std::move(description),
                                              std::move(translated));
  library->log_declined_region_forms();
  if (library->kernels().size() == 1 && !library->has_function_constants()) {
    // Building the one kernel now costs nothing extra and reports errors here, like Metal
    // (with function constants, the pipeline's values decide which object is needed).
    std::shared_ptr<KernelObject> object;
    status = library->load(library->kernels()[0], {}, &object);
  } else {
    status = library->check();
  }
  if (!status.ok()) return Status::error(with_source_lines(status.message(), source));
  *out = std::move(library);
  return Status();
}

}  // namespace etm::device::cpu
