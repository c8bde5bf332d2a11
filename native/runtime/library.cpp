#include "runtime/library.h"

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

std::vector<KernelFunction*> ShaderLibrary::kernels() const {
  std::lock_guard lock(mutex_);
  std::vector<KernelFunction*> result;
  for (const auto& entry : kernels_) result.push_back(entry.second.get());
  return result;
}

}  // namespace etm
