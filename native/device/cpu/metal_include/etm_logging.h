// metal_logging: metal::os_log. The CPU device writes shader log messages to standard error,
// one line each, prefixed with the log's subsystem and category (Metal sends them to the
// unified log). Arguments follow printf conventions; half, bfloat and float print as double.
#pragma once

#include "etm_bfloat.h"

namespace etm_msl {
extern "C" int dprintf(int descriptor, const char* format, ...);

template <class T> constexpr auto printable(T value) {
  static_assert(std::is_arithmetic<T>::value || is_half<T>::value || is_bfloat<T>::value ||
                    std::is_pointer<T>::value,
                "os_log arguments are scalars or strings");
  if constexpr (is_float_scalar_v<T>) {
    return double(float(value));
  } else {
    return value;
  }
}
}  // namespace etm_msl

namespace metal {
class os_log {
 public:
  constexpr os_log(const char* subsystem, const char* category) : subsystem_(subsystem), category_(category) {}

  template <class... A> void log(const char* format, A... arguments) const { emit("", format, arguments...); }
  template <class... A> void log_debug(const char* format, A... arguments) const {
    emit("debug ", format, arguments...);
  }
  template <class... A> void log_info(const char* format, A... arguments) const {
    emit("info ", format, arguments...);
  }
  template <class... A> void log_error(const char* format, A... arguments) const {
    emit("error ", format, arguments...);
  }
  template <class... A> void log_fault(const char* format, A... arguments) const {
    emit("fault ", format, arguments...);
  }

 private:
  template <class... A> void emit(const char* level, const char* format, A... arguments) const {
    constexpr int standard_error = 2;
    etm_msl::dprintf(standard_error, "[%s:%s] %s", subsystem_, category_, level);
    etm_msl::dprintf(standard_error, format, etm_msl::printable(arguments)...);
    etm_msl::dprintf(standard_error, "\n");
  }

  const char* subsystem_;
  const char* category_;
};

constexpr os_log os_log_default("", "");
}  // namespace metal
