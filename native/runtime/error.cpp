#include "runtime/error.h"

#include <cstdio>

#include "device/settings.h"
#include "device/tls_model.h"

namespace etm {
namespace {

// An invalid value logs at the default level; the runtime's start reports it as an error.
LogLevel configured_level() {
  std::string value;
  if (!settings::read_choice("ETMETAL_LOG", &value).ok()) return LogLevel::warn;
  if (value == "error") return LogLevel::error;
  if (value == "info") return LogLevel::info;
  if (value == "debug") return LogLevel::debug;
  return LogLevel::warn;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

ETM_THREAD_LOCAL std::string thread_last_error;

}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = configured_level();
  return static_cast<int>(level) <= static_cast<int>(threshold);
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::fprintf(stderr, "etmetal %s: %s\n", level_name(level), message.c_str());
}

void set_last_error(const std::string& message) { thread_last_error = message; }
const char* last_error() { return thread_last_error.c_str(); }

}  // namespace etm
