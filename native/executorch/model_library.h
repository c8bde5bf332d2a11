// A model .so that AOTInductor compiled for "mps", loaded from bytes: the container entry
// points, and its release (container functions stay valid while the ModelLibrary lives).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <etmetal/aoti_shim.h>

namespace etmetal_executorch {

// The model container API every AOTInductor model library exports (aoti_runtime/interface.h).
using AOTIRuntimeError = int32_t;
using ContainerHandle = struct AOTInductorModelContainerOpaque*;
using CreateWithDeviceFn = AOTIRuntimeError (*)(ContainerHandle*, size_t num_models,
                                                const char* device, const char* cubin_dir);
using DeleteFn = AOTIRuntimeError (*)(ContainerHandle);
using GetCountFn = AOTIRuntimeError (*)(ContainerHandle, size_t*);
using GetBlobSizeFn = AOTIRuntimeError (*)(ContainerHandle, uint64_t*);
using RunFn = AOTIRuntimeError (*)(ContainerHandle, AtenTensorHandle* inputs, size_t num_inputs,
                                   AtenTensorHandle* outputs, size_t num_outputs,
                                   void* stream, void* proxy_executor);
using UpdateConstantsFn = AOTIRuntimeError (*)(ContainerHandle, const uint8_t* blob);
using GetLastErrorFn = AOTIRuntimeError (*)(const char** message);

struct ContainerApi {
  CreateWithDeviceFn create_with_device = nullptr;
  DeleteFn destroy = nullptr;
  GetCountFn num_inputs = nullptr;
  GetCountFn num_outputs = nullptr;
  GetBlobSizeFn constants_blob_size = nullptr;  // optional (older torch)
  RunFn run = nullptr;
  UpdateConstantsFn update_constants_from_blob = nullptr;
  GetLastErrorFn last_error = nullptr;  // optional (torch < 2.8)
};

// Whether the model library in `bytes` must be opened with RTLD_DEEPBIND (Linux): true when
// the global scope defines one of the aoti_torch_* / etmetal_* / metal_* names it imports in
// an object other than the libetmetal this library is linked to, or when its symbols cannot be
// read. Always false where the loader has no deep binding.
bool needs_deep_binding(const void* bytes, size_t size);

class ModelLibrary {
 public:
  // Loads the library `bytes` holds, from a file in this process's model folder (one per
  // distinct library). On failure returns null and sets `error`. `label` names the library in
  // messages.
  static std::unique_ptr<ModelLibrary> load(const void* bytes, size_t size,
                                            const std::string& label, std::string* error);
  ~ModelLibrary();
  ModelLibrary(const ModelLibrary&) = delete;
  ModelLibrary& operator=(const ModelLibrary&) = delete;

  const ContainerApi& api() const { return api_; }
  // The model's own description of its last failure ("" when it has none).
  std::string last_error() const;

 private:
  ModelLibrary() = default;
  void* handle_ = nullptr;
  ContainerApi api_;
};

}  // namespace etmetal_executorch
