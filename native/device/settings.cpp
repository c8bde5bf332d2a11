#include "device/settings.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace etm::settings {
namespace {

enum class Kind { integer, choice, text };

struct Variable {
  const char* name;
  Kind kind;
  const char* accepted;  // choices separated by '|'; for integers "min..max"
  int64_t min = 0, max = 0;
  const char* default_value = "";
};

const std::vector<Variable>& variables() {
  static const std::vector<Variable> table = {
      {"ETMETAL_DEVICE", Kind::choice, "metal|cpu", 0, 0, "metal where the build has it, else cpu"},
      {"ETMETAL_LOG", Kind::choice, "error|warn|info|debug", 0, 0, "warn"},
      {"ETMETAL_MAX_OPS_PER_BUFFER", Kind::integer, "", 1, 1 << 30, "by GPU family"},
      {"ETMETAL_MAX_MB_PER_BUFFER", Kind::integer, "", 1, 1 << 30, "by GPU family"},
      {"ETMETAL_POOL_MB", Kind::integer, "", 0, int64_t{1} << 40, "a quarter of the working set"},
      {"ETMETAL_FAST_MATH", Kind::choice, "0|1", 0, 0, "0"},
      {"ETMETAL_CAPTURE", Kind::text, "", 0, 0, "no GPU capture"},
      {"ETMETAL_RESIDENT_MB", Kind::integer, "", 0, int64_t{1} << 40,
       "0: no residency set (Metal makes buffers resident per command buffer)"},
      {"ETMETAL_CXX", Kind::text, "", 0, 0, "g++ >= 12 or clang++ >= 15 on PATH"},
      {"ETMETAL_CXXFLAGS", Kind::text, "", 0, 0, "none"},
      {"ETMETAL_CACHE_DIR", Kind::text, "", 0, 0, "$XDG_CACHE_HOME/etmetal or ~/.cache/etmetal"},
      {"ETMETAL_CACHE_MAX_MB", Kind::integer, "", 0, int64_t{1} << 30, "1024 (0: no limit)"},
      {"ETMETAL_CPU_THREADS", Kind::integer, "", 1, 1024, "one per core"},
      {"ETMETAL_CPU_OVERLAP", Kind::choice, "0|1", 0, 0,
       "1 (independent small dispatches of a command buffer run beside each other on idle workers)"},
      {"ETMETAL_CPU_EXECUTION", Kind::choice, "loop|fibers|regions", 0, 0, "chosen per kernel"},
      {"ETMETAL_KERNEL_TIMEOUT_MS", Kind::integer, "", 0, int64_t{1} << 40, "300000 (0: no limit)"},
      {"ETMETAL_FALLBACKS", Kind::choice, "mpsgraph|msl", 0, 0,
       "mpsgraph: mm, bmm and conv2d through MPSGraph where the device runs graphs (Metal)"},
      {"ETMETAL_OP_SHAPES", Kind::choice, "gpu|cpu", 0, 0,
       "the device's own: gpu on Metal (a threadgroup per long line or large window), cpu on the CPU device"},
      {"ETMETAL_VALIDATE", Kind::choice, "0|1", 0, 0, "0 (1: the CPU device checks every kernel access)"},
      {"ETMETAL_VALIDATE_REPORTS", Kind::text, "", 0, 0,
       "none (a file: every failed validated dispatch's message is also appended to it)"},
  };
  return table;
}

const Variable* find(const char* name) {
  for (const Variable& variable : variables())
    if (std::strcmp(variable.name, name) == 0) return &variable;
  return nullptr;
}

std::string value_of(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string accepted_text(const Variable& variable) {
  switch (variable.kind) {
    case Kind::integer:
      return "an integer from " + std::to_string(variable.min) + " to " + std::to_string(variable.max);
    case Kind::choice: {
      std::string text = variable.accepted;
      std::string out;
      size_t start = 0;
      for (size_t bar; (bar = text.find('|', start)) != std::string::npos; start = bar + 1)
        out += (out.empty() ? "" : ", ") + text.substr(start, bar - start);
      return "one of " + out + (out.empty() ? "" : " or ") + text.substr(start);
    }
    case Kind::text:
      return "any text";
  }
  return "";
}

Status invalid(const Variable& variable, const std::string& text) {
  return Status::error(std::string(variable.name) + " must be " + accepted_text(variable) +
                       ", not '" + text + "'");
}

// Validates the variable's current value; *integer / *choice receive it when set.
Status parse(const Variable& variable, int64_t* integer, std::string* choice) {
  const std::string text = value_of(variable.name);
  if (text.empty()) return Status();
  switch (variable.kind) {
    case Kind::integer: {
      errno = 0;
      char* end = nullptr;
      const long long parsed = std::strtoll(text.c_str(), &end, 10);
      if (errno == ERANGE || *end != '\0' || parsed < variable.min || parsed > variable.max)
        return invalid(variable, text);
      if (integer) *integer = parsed;
      return Status();
    }
    case Kind::choice: {
      const std::string options = std::string("|") + variable.accepted + "|";
      if (text.find('|') != std::string::npos ||
          options.find("|" + text + "|") == std::string::npos)
        return invalid(variable, text);
      if (choice) *choice = text;
      return Status();
    }
    case Kind::text:
      if (choice) *choice = text;
      return Status();
  }
  return Status();
}

Status read(const char* name, Kind kind, int64_t* integer, std::string* text) {
  const Variable* variable = find(name);
  if (!variable || variable->kind != kind)
    return Status::error(std::string("internal: ") + name + " is not a known setting of that kind");
  return parse(*variable, integer, text);
}

}  // namespace

Status read_integer(const char* name, int64_t* value) { return read(name, Kind::integer, value, nullptr); }
Status read_choice(const char* name, std::string* value) { return read(name, Kind::choice, nullptr, value); }
Status read_text(const char* name, std::string* value) { return read(name, Kind::text, nullptr, value); }

Status check_all() {
  for (const Variable& variable : variables()) {
    Status status = parse(variable, nullptr, nullptr);
    if (!status.ok()) return status;
  }
  return Status();
}

std::string describe() {
  std::ostringstream out;
  for (const Variable& variable : variables()) {
    const std::string text = value_of(variable.name);
    if (text.empty())
      out << variable.name << " unset (default: " << variable.default_value << ")";
    else
      out << variable.name << "=" << text;
    const Status status = parse(variable, nullptr, nullptr);
    if (!status.ok()) out << "  INVALID: " << status.message();
    out << "  [" << accepted_text(variable) << "]\n";
  }
  return out.str();
}

}  // namespace etm::settings
