// Kernels of the ops' own MSL sources (shaders/*.metal): each file is compiled once per
// process, on first use, through the same device path as a model's kernels.
#pragma once

#include <string>

#include "runtime/library.h"

namespace etm::ops {

// The source of shaders/<file>, its `#include "..."` of other embedded files (the parameter
// headers in shaders/params/) inlined; throws etm::Error for an unknown file.
const std::string& shader_source(const std::string& file);

// Kernel `name` of shaders/<file>. Thread-safe; the kernel lives as long as the process.
KernelFunction& shader_kernel(const std::string& file, const std::string& name);

}  // namespace etm::ops
