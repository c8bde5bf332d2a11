#include "runtime/commit_policy.h"

#include "device/settings.h"
#include "runtime/error.h"

namespace etm {
namespace {

void override_from_env(const char* name, int64_t* value) {
  const device::Status status = settings::read_integer(name, value);
  ETM_REQUIRE(status.ok(), status.message());
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
