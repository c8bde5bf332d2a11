// Kernels of the ops' own MSL sources (shaders/*.metal): each file is compiled once per
// process, on first use, through the same device path as a model's kernels.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "runtime/library.h"

namespace etm::ops {

// The source of shaders/<file>, its `#include "..."` of other embedded files (the parameter
// headers in shaders/params/) inlined; throws etm::Error for an unknown file.
const std::string& shader_source(const std::string& file);

// Kernel `name` of shaders/<file>. Thread-safe; the kernel lives as long as the process.
KernelFunction& shader_kernel(const std::string& file, const std::string& name);

// Kernel `name` of shaders/<file> specialised with function constant values: one pipeline per
// distinct set, created on first request. Give a value to every constant the kernel uses (a
// Metal pipeline needs them all) and to no other.
KernelFunction& shader_kernel(const std::string& file, const std::string& name,
                              const std::vector<device::FunctionConstantValue>& constants);

// Boolean function constant values by name, for shader_kernel.
std::vector<device::FunctionConstantValue> bool_constants(
    std::initializer_list<std::pair<const char*, bool>> values);

}  // namespace etm::ops
