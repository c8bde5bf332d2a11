// Shader libraries and their kernel functions (ExecuTorch's ETMetalShaderLibrary and
// ETMetalKernelFunction). A kernel function is immutable once made: the per-dispatch state
// (bound arguments) lives in the stream of the thread that encodes, so one kernel may be
// encoded from several threads at once.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device/device.h"

namespace etm {

class ShaderLibrary;

class KernelFunction {
 public:
  KernelFunction(ShaderLibrary* library, std::string name,
                 std::shared_ptr<device::Pipeline> pipeline)
      : library_(library), name_(std::move(name)), pipeline_(std::move(pipeline)) {}
  const std::string& name() const { return name_; }
  const std::shared_ptr<device::Pipeline>& pipeline() const { return pipeline_; }
  uint32_t max_threads_per_group() const { return pipeline_->max_total_threads_per_threadgroup(); }
  ShaderLibrary* library() const { return library_; }

 private:
  ShaderLibrary* library_;
  std::string name_;
  std::shared_ptr<device::Pipeline> pipeline_;
};

class ShaderLibrary {
 public:
  // `label` names the library in traces: the shader file, or source_label() of its source.
  explicit ShaderLibrary(std::shared_ptr<device::Library> library, std::string label = {})
      : library_(std::move(library)), label_(std::move(label)) {}
  const std::string& label() const { return label_; }
  // "msl <8 hex digits of a hash of the source>": tells the libraries of a model apart.
  static std::string source_label(const std::string& source);
  // The kernel of that name, created on first request; the library keeps it.
  KernelFunction* kernel(const std::string& name);
  // The kernel specialised with function constant values; each distinct set of values is
  // its own pipeline, created on first request.
  KernelFunction* kernel(const std::string& name, const std::vector<device::FunctionConstantValue>& constants);
  // Kernels created so far (to unregister their handles when the library goes).
  std::vector<KernelFunction*> kernels() const;

 private:
  std::shared_ptr<device::Library> library_;
  const std::string label_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<KernelFunction>> kernels_;
};

}  // namespace etm
