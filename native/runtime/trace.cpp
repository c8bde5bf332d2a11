#include "runtime/trace.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "runtime/error.h"
#include "device/tls_model.h"

namespace etm::trace {
namespace {

// The open trace file. Never destroyed: streams may still complete work while the process
// exits; events after the file is closed are dropped.
class TraceFile {
 public:
  static TraceFile* get() {
    static TraceFile* instance = open_from_environment();
    return instance;
  }

  void write_event(const std::string& json) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!file_) return;
    std::fputs(first_ ? "[\n" : ",\n", file_);
    first_ = false;
    std::fputs(json.c_str(), file_);
  }

  uint32_t next_track() { return tracks_.fetch_add(1) + 1; }
  uint32_t process_id() const { return pid_; }

 private:
  static TraceFile* open_from_environment() {
    const char* path = std::getenv("ETMETAL_TRACE");
    if (!path || !*path) return nullptr;
    std::FILE* file = std::fopen(path, "w");
    if (!file) {
      log(LogLevel::error, concat("ETMETAL_TRACE: cannot write ", path, "; no trace is recorded"));
      return nullptr;
    }
    auto* trace = new TraceFile(file);
    std::atexit([] { get()->close(); });
    return trace;
  }

  explicit TraceFile(std::FILE* file) : file_(file), pid_(static_cast<uint32_t>(::getpid())) {}

  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!file_) return;
    std::fputs(first_ ? "[]\n" : "\n]\n", file_);
    std::fclose(file_);
    file_ = nullptr;
  }

  std::mutex mutex_;
  std::FILE* file_;
  bool first_ = true;
  const uint32_t pid_;
  std::atomic<uint32_t> tracks_{0};
};

std::string format_us(double us) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", us);
  return text;
}

std::string event_head(TraceFile* file, const char* phase, uint32_t track,
                       const std::string& category, const std::string& name) {
  return concat("{\"ph\": \"", phase, "\", \"pid\": ", file->process_id(), ", \"tid\": ", track,
                ", \"cat\": ", json_string(category), ", \"name\": ", json_string(name));
}

}  // namespace

bool enabled() { return TraceFile::get() != nullptr; }

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

uint32_t new_track(const std::string& name) {
  TraceFile* file = TraceFile::get();
  if (!file) return 0;
  const uint32_t track = file->next_track();
  file->write_event(event_head(file, "M", track, "__metadata", "thread_name") +
                    ", \"args\": {\"name\": " + json_string(name) + "}}");
  return track;
}

uint32_t thread_track() {
  TraceFile* file = TraceFile::get();
  if (!file) return 0;
  ETM_THREAD_LOCAL uint32_t track = 0;
  if (track == 0) {
    track = file->next_track();
    file->write_event(event_head(file, "M", track, "__metadata", "thread_name") +
                      concat(", \"args\": {\"name\": \"host thread ", track, "\"}}"));
  }
  return track;
}

void span(uint32_t track, const std::string& category, const std::string& name, double start_us,
          double duration_us, const std::string& args_json) {
  TraceFile* file = TraceFile::get();
  if (!file) return;
  file->write_event(event_head(file, "X", track, category, name) + ", \"ts\": " + format_us(start_us) +
                    ", \"dur\": " + format_us(duration_us < 0 ? 0 : duration_us) + ", \"args\": {" +
                    args_json + "}}");
}

void instant(uint32_t track, const std::string& category, const std::string& name, double at_us,
             const std::string& args_json) {
  TraceFile* file = TraceFile::get();
  if (!file) return;
  file->write_event(event_head(file, "i", track, category, name) + ", \"s\": \"t\", \"ts\": " +
                    format_us(at_us) + ", \"args\": {" + args_json + "}}");
}

}  // namespace etm::trace
