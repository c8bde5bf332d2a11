#include "runtime/library.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "runtime/error.h"

namespace etm {

namespace {

// Names a kernel and its constant values: equal sets of values give equal keys.
std::string specialization_key(const std::string& name, const std::vector<device::FunctionConstantValue>& constants) {
  std::vector<std::string> parts;
  for (const device::FunctionConstantValue& c : constants) {
    char floating[40];
    std::snprintf(floating, sizeof floating, "%a", c.floating);  // exact
    const std::string value = c.kind == device::FunctionConstantValue::Kind::floating
                                  ? "f" + std::string(floating)
                                  : (c.kind == device::FunctionConstantValue::Kind::boolean ? "b" : "i") +
                                        std::to_string(c.integer);
    parts.push_back((c.name.empty() ? "#" + std::to_string(c.index) : "n" + c.name) + "=" + value);
  }
  std::sort(parts.begin(), parts.end());
  std::string key = name;
  for (const std::string& part : parts) key += '\0' + part;
  return key;
}

}  // namespace

KernelFunction* ShaderLibrary::kernel(const std::string& name) { return kernel(name, {}); }

KernelFunction* ShaderLibrary::kernel(const std::string& name,
                                      const std::vector<device::FunctionConstantValue>& constants) {
  const std::string key = specialization_key(name, constants);
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(key);
  if (it != kernels_.end()) return it->second.get();
  std::shared_ptr<device::Pipeline> pipeline;
  const device::Status status = constants.empty() ? library_->new_pipeline(name, &pipeline)
                                                  : library_->new_specialized_pipeline(name, constants, &pipeline);
  ETM_REQUIRE(status.ok() && pipeline, "kernel '", name, "': ", status.message());
  auto function = std::make_unique<KernelFunction>(this, name, std::move(pipeline));
  KernelFunction* raw = function.get();
  kernels_.emplace(key, std::move(function));
  return raw;
}

std::string ShaderLibrary::source_label(const std::string& source) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (const char c : source) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  char text[24];
  std::snprintf(text, sizeof text, "msl %08llx", static_cast<unsigned long long>(hash >> 32));
  return text;
}

std::vector<KernelFunction*> ShaderLibrary::kernels() const {
  std::lock_guard lock(mutex_);
  std::vector<KernelFunction*> result;
  for (const auto& entry : kernels_) result.push_back(entry.second.get());
  return result;
}

}  // namespace etm
