#include "ops/shader_kernels.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "ops/embedded_shaders.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

using FileMap = std::map<std::string, std::string>;

// Appends `text` to `out` with each line `#include "<path>"` replaced by the embedded file at
// <path>, itself expanded; a file already inlined is skipped and `#pragma once` dropped, as the
// preprocessor would. Devices compile one source string, so the shaders' shared parameter
// headers (shaders/params/) travel inside it.
void inline_includes(const FileMap& files, const std::string& name, const std::string& text,
                     std::set<std::string>& inlined, std::string& out) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string line = text.substr(begin, end - begin);
    begin = end;
    const size_t first = line.find_first_not_of(" \t");
    const std::string directive = first == std::string::npos ? "" : line.substr(first);
    if (directive.rfind("#pragma once", 0) == 0) continue;
    if (directive.rfind("#include \"", 0) != 0) {
      out += line;
      continue;
    }
    const size_t close = directive.find('"', 10);
    ETM_REQUIRE(close != std::string::npos, "shaders/", name, ": unterminated #include");
    const std::string path = directive.substr(10, close - 10);
    auto it = files.find(path);
    ETM_REQUIRE(it != files.end(), "shaders/", name, " includes \"", path, "\", which is not built into libetmetal");
    if (inlined.insert(path).second) inline_includes(files, path, it->second, inlined, out);
  }
  if (!text.empty() && text.back() != '\n') out += '\n';
}

}  // namespace

const std::string& shader_source(const std::string& file) {
  static const FileMap sources = [] {
    FileMap embedded, expanded;
    for (size_t i = 0; i < kShaderFiles_count; ++i)
      embedded.emplace(kShaderFiles[i].path, std::string(kShaderFiles[i].contents, kShaderFiles[i].size));
    for (const auto& [name, text] : embedded) {
      std::set<std::string> inlined;
      inline_includes(embedded, name, text, inlined, expanded[name]);
    }
    return expanded;
  }();
  auto it = sources.find(file);
  ETM_REQUIRE(it != sources.end(), "no shader file '", file, "' is built into libetmetal");
  return it->second;
}

KernelFunction& shader_kernel(const std::string& file, const std::string& name) {
  return shader_kernel(file, name, {});
}

KernelFunction& shader_kernel(const std::string& file, const std::string& name,
                              const std::vector<device::FunctionConstantValue>& constants) {
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
  return *library->kernel(name, constants);
}

std::vector<device::FunctionConstantValue> bool_constants(
    std::initializer_list<std::pair<const char*, bool>> values) {
  std::vector<device::FunctionConstantValue> constants;
  for (const auto& [name, value] : values) {
    device::FunctionConstantValue constant;
    constant.name = name;
    constant.kind = device::FunctionConstantValue::Kind::boolean;
    constant.integer = value ? 1 : 0;
    constants.push_back(constant);
  }
  return constants;
}

}  // namespace etm::ops
