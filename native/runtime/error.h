// Errors inside the runtime are exceptions (etm::Error); the ABI layer turns them into
// return codes and the thread's last-error message. Logging follows ETMETAL_LOG.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace etm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// An error whose message already names the C function that failed (a stream's sticky error,
// recorded by an earlier call): the ABI reports it as it is, without a second function name.
class AttributedError : public Error {
 public:
  using Error::Error;
};

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)...));
}

#define ETM_REQUIRE(condition, ...) \
  do {                              \
    if (!(condition)) ::etm::fail(__VA_ARGS__); \
  } while (0)

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Writes "etmetal <level>: message" to stderr when level is within ETMETAL_LOG (default warn).
void log(LogLevel level, const std::string& message);
bool log_enabled(LogLevel level);

void set_last_error(const std::string& message);
const char* last_error();

}  // namespace etm
