// When a stream submits its open command buffer on its own: after a number of dispatches or
// once the buffers bound reach a number of megabytes, whichever comes first (MLX's rule).
#pragma once

#include <cstdint>
#include <string>

namespace etm {

struct CommitPolicy {
  int64_t max_ops_per_buffer = 40;
  int64_t max_mb_per_buffer = 40;

  bool should_commit(int64_t dispatches, int64_t bytes) const {
    return dispatches >= max_ops_per_buffer || bytes >= max_mb_per_buffer * (int64_t{1} << 20);
  }
};

// Defaults by GPU family, as MLX chooses them: phones (architecture suffix 'p') 20 ops /
// 40 MB, base and Pro ('g', 's') 40 / 40, Max and Ultra ('c', 'd') 50 / 50; anything else,
// the CPU device included, 40 / 40. ETMETAL_MAX_OPS_PER_BUFFER and ETMETAL_MAX_MB_PER_BUFFER
// override (positive integers; anything else is ignored with a warning).
CommitPolicy commit_policy_for(const std::string& architecture);

}  // namespace etm
