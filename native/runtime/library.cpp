#include "runtime/library.h"

#include <cstdio>

#include "runtime/error.h"

namespace etm {

KernelFunction* ShaderLibrary::kernel(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(name);
  if (it != kernels_.end()) return it->second.get();
  std::shared_ptr<device::Pipeline> pipeline;
  const device::Status status = library_->new_pipeline(name, &pipeline);
  ETM_REQUIRE(status.ok() && pipeline, "kernel '", name, "': ", status.message());
  auto function = std::make_unique<KernelFunction>(this, name, std::move(pipeline));
  KernelFunction* raw = function.get();
  kernels_.emplace(name, std::move(function));
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
