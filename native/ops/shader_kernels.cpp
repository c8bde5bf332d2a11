#include "ops/shader_kernels.h"

#include <map>
#include <memory>
#include <mutex>

#include "ops/embedded_shaders.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {

const std::string& shader_source(const std::string& file) {
  static const std::map<std::string, std::string> sources = [] {
    std::map<std::string, std::string> by_name;
    for (size_t i = 0; i < kShaderFiles_count; ++i)
      by_name.emplace(kShaderFiles[i].path, std::string(kShaderFiles[i].contents, kShaderFiles[i].size));
    return by_name;
  }();
  auto it = sources.find(file);
  ETM_REQUIRE(it != sources.end(), "no shader file '", file, "' is built into libetmetal");
  return it->second;
}

KernelFunction& shader_kernel(const std::string& file, const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<ShaderLibrary>>& libraries =
      *new std::map<std::string, std::unique_ptr<ShaderLibrary>>();  // outlives exit-time work
  ShaderLibrary* library;
  {
    std::lock_guard lock(mutex);
    auto it = libraries.find(file);
    if (it == libraries.end()) {
      std::shared_ptr<device::Library> compiled;
      const device::Status status = Runtime::get().device().new_library(shader_source(file), &compiled);
      ETM_REQUIRE(status.ok() && compiled, "cannot compile shaders/", file, ": ", status.message());
      it = libraries.emplace(file, std::make_unique<ShaderLibrary>(std::move(compiled), "shaders/" + file)).first;
    }
    library = it->second.get();
  }
  return *library->kernel(name);
}

}  // namespace etm::ops
