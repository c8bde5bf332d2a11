#include "runtime/commit_policy.h"

#include <cstdlib>

#include "runtime/error.h"

namespace etm {
namespace {

void override_from_env(const char* name, int64_t* value) {
  const char* text = std::getenv(name);
  if (!text || !*text) return;
  char* end = nullptr;
  const long long parsed = std::strtoll(text, &end, 10);
  if (*end != '\0' || parsed <= 0) {
    log(LogLevel::warn, concat("ignoring ", name, "=", text, ": expected a positive integer"));
    return;
  }
  *value = parsed;
}

}  // namespace

CommitPolicy commit_policy_for(const std::string& architecture) {
  CommitPolicy policy;
  const char suffix = architecture.empty() ? '\0' : architecture.back();
  if (architecture.rfind("applegpu_", 0) == 0) {
    if (suffix == 'p') {
      policy = {20, 40};
    } else if (suffix == 'c' || suffix == 'd') {
      policy = {50, 50};
    }
  }
  override_from_env("ETMETAL_MAX_OPS_PER_BUFFER", &policy.max_ops_per_buffer);
  override_from_env("ETMETAL_MAX_MB_PER_BUFFER", &policy.max_mb_per_buffer);
  return policy;
}

}  // namespace etm
