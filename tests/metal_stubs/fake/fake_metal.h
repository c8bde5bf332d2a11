// What a test can ask the fake Metal (fake_metal.mm) about what the device did to it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fake_metal {

struct CompileRecord {
  unsigned long language_version = 0;
  bool math_mode_set = false;
  long math_mode = -1;
  long floating_point_functions = -1;
  bool fast_math_enabled = true;  // Metal's default
};

// Options of the last newLibraryWithSource:options:error:.
CompileRecord last_compile();
// Misuses that real Metal answers with a validation assertion (a process abort).
std::vector<std::string> violations();
// Encoder calls in order, e.g. "compute concurrent", "pipeline add_one", "dispatch_threads
// 8x1x1 4x1x1", "barrier", "end", "blit", "copy 0->4 8", "fill 0 16 171",
// "mps command buffer", "graph".
std::vector<std::string> command_log();
void clear_logs();

size_t residency_allocations();
size_t residency_commits();
size_t residency_requests();
size_t queues_with_residency();
size_t live_buffers();
bool capture_running();
// MPSGraph objects created so far (graph cache misses of the device).
size_t graphs_built();

}  // namespace fake_metal
