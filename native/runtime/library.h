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
      : library_(library),
        name_(std::move(name)),
        pipeline_(std::move(pipeline)),
        max_threads_per_group_(pipeline_->max_total_threads_per_threadgroup()),
        static_threadgroup_bytes_(pipeline_->static_threadgroup_memory_length()),
        written_buffers_(written_buffer_mask(*pipeline_)) {}
  const std::string& name() const { return name_; }
  const std::shared_ptr<device::Pipeline>& pipeline() const { return pipeline_; }
  // The pipeline's properties, read once: every dispatch asks for them.
  uint32_t max_threads_per_group() const { return max_threads_per_group_; }
  size_t static_threadgroup_bytes() const { return static_threadgroup_bytes_; }
  bool writes_buffer(uint32_t index) const { return index >= 32 || (written_buffers_ >> index & 1); }
  ShaderLibrary* library() const { return library_; }

 private:
  static uint32_t written_buffer_mask(const device::Pipeline& pipeline) {
    uint32_t mask = 0;
    for (uint32_t index = 0; index < 32; ++index) {
      if (pipeline.writes_buffer(index)) mask |= uint32_t{1} << index;
    }
    return mask;
  }

  ShaderLibrary* library_;
  std::string name_;
  std::shared_ptr<device::Pipeline> pipeline_;
  const uint32_t max_threads_per_group_;
  const size_t static_threadgroup_bytes_;
  const uint32_t written_buffers_;  // bit i: the kernel may write the buffer at index i
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
