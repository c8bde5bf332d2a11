// ExecuTorch backend "MetalBackend" over libetmetal: runs the Metal delegates that ExecuTorch's
// MetalBackend.preprocess writes (a model .so and a weights blob in the program's named data),
// calling libetmetal only through its public C ABI.
//
// Delegate layout: processed bytes "<so key>\n<weights key>"; empty processed bytes (older
// programs) mean "<method>_so_blob" / "<method>_weights_blob" from the method_name compile spec.
// Each delegate owns its model library and container; destroy releases exactly those.

#include <cinttypes>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include <etmetal/etmetal.h>

#include "model_library.h"

namespace etmetal_executorch {
namespace {

using executorch::runtime::ArrayRef;
using executorch::runtime::Backend;
using executorch::runtime::BackendExecutionContext;
using executorch::runtime::BackendInitContext;
using executorch::runtime::BackendInterface;
using executorch::runtime::CompileSpec;
using executorch::runtime::DelegateHandle;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::FreeableBuffer;
using executorch::runtime::NamedDataMap;
using executorch::runtime::Result;
using executorch::runtime::Span;
using executorch::runtime::etensor::Tensor;

constexpr const char* kBackendName = "MetalBackend";
constexpr const char* kSoSuffix = "_so_blob";
constexpr const char* kWeightsSuffix = "_weights_blob";

struct DelegateKeys {
  std::string so;
  std::string weights;
};

struct MetalDelegate {
  std::unique_ptr<ModelLibrary> library;
  ContainerHandle container = nullptr;
  size_t num_inputs = 0;
  size_t num_outputs = 0;
  std::string label;

  ~MetalDelegate() {
    if (container != nullptr) library->api().destroy(container);
  }
};

// Owns an ABI tensor handle; deletes it unless released.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  explicit OwnedTensor(AtenTensorHandle handle) : handle_(handle) {}
  ~OwnedTensor() {
    if (handle_ != nullptr) aoti_torch_delete_tensor_object(handle_);
  }
  OwnedTensor(OwnedTensor&& other) noexcept : handle_(other.release()) {}
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  AtenTensorHandle get() const { return handle_; }
  AtenTensorHandle* out() { return &handle_; }
  AtenTensorHandle release() {
    AtenTensorHandle handle = handle_;
    handle_ = nullptr;
    return handle;
  }

 private:
  AtenTensorHandle handle_ = nullptr;
};

bool ends_with(const std::string& text, const char* suffix) {
  size_t length = std::strlen(suffix);
  return text.size() > length && text.compare(text.size() - length, length, suffix) == 0;
}

std::string compile_spec_value(ArrayRef<CompileSpec> specs, const char* key) {
  for (const CompileSpec& spec : specs) {
    if (spec.key != nullptr && std::strcmp(spec.key, key) == 0 && spec.value.buffer != nullptr) {
      return std::string(static_cast<const char*>(spec.value.buffer), spec.value.nbytes);
    }
  }
  return "";
}

Result<DelegateKeys> delegate_keys(const FreeableBuffer* processed,
                                   ArrayRef<CompileSpec> specs) {
  std::string text;
  if (processed != nullptr && processed->data() != nullptr) {
    text.assign(static_cast<const char*>(processed->data()), processed->size());
  }
  if (text.empty()) {
    std::string method = compile_spec_value(specs, "method_name");
    if (method.empty()) {
      ET_LOG(Error, "etmetal MetalBackend: the delegate names no data (empty processed bytes "
                    "and no method_name compile spec)");
      return Error::InvalidProgram;
    }
    return DelegateKeys{method + kSoSuffix, method + kWeightsSuffix};
  }
  size_t newline = text.find('\n');
  DelegateKeys keys;
  if (newline != std::string::npos) {
    keys.so = text.substr(0, newline);
    keys.weights = text.substr(newline + 1);
  }
  if (!ends_with(keys.so, kSoSuffix) || !ends_with(keys.weights, kWeightsSuffix) ||
      keys.weights.find('\n') != std::string::npos) {
    ET_LOG(Error, "etmetal MetalBackend: processed bytes are not \"<key>_so_blob\\n"
                  "<key>_weights_blob\" (%zu bytes)", text.size());
    return Error::InvalidProgram;
  }
  return keys;
}

std::string runtime_error_text() {
  const char* message = etmetal_last_error();
  return message != nullptr && message[0] != '\0' ? message : "no message";
}

std::string model_error_text(const MetalDelegate& delegate) {
  std::string model = delegate.library->last_error();
  std::string runtime = runtime_error_text();
  return model.empty() ? runtime : model + "; " + runtime;
}

// A device tensor with an ExecuTorch tensor's sizes, strides and dtype. The device allocates
// it: libetmetal does not bind caller memory in place on every device (the CPU device copies
// nothing it does not own), so data moves with host copies of the dense bytes.
Error new_device_tensor(const Tensor& tensor, OwnedTensor* device_tensor) {
  std::vector<int64_t> sizes(tensor.sizes().begin(), tensor.sizes().end());
  std::vector<int64_t> strides(tensor.strides().begin(), tensor.strides().end());
  // ExecuTorch's ScalarType codes are c10's, which are the ABI's dtype codes.
  int32_t dtype = static_cast<int32_t>(tensor.scalar_type());
  if (aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                               dtype, aoti_torch_device_type_mps(), 0,
                               device_tensor->out()) != 0) {
    ET_LOG(Error, "etmetal MetalBackend: cannot allocate a device tensor: %s",
           runtime_error_text().c_str());
    return Error::MemoryAllocationFailed;
  }
  return Error::Ok;
}

// The host address of a device tensor's first byte (waits for work that writes it).
Error device_bytes(AtenTensorHandle tensor, void** data) {
  if (aoti_torch_get_data_ptr(tensor, data) != 0 || *data == nullptr) {
    ET_LOG(Error, "etmetal MetalBackend: a device tensor has no host address: %s",
           runtime_error_text().c_str());
    return Error::Internal;
  }
  return Error::Ok;
}

// An input: a device tensor holding a copy of the ExecuTorch tensor's (dense) bytes.
Error copy_input(const Tensor& tensor, OwnedTensor* device_tensor) {
  Error error = new_device_tensor(tensor, device_tensor);
  if (error != Error::Ok || tensor.nbytes() == 0) return error;
  void* data = nullptr;
  error = device_bytes(device_tensor->get(), &data);
  if (error == Error::Ok) std::memcpy(data, tensor.const_data_ptr(), tensor.nbytes());
  return error;
}

// Resizes `destination` to the model output's sizes and encodes a copy of the output into
// `staging`, a device tensor laid out as `destination` (dtype and strides converted on the
// stream); its bytes are read once the stream has run.
Error stage_output(AtenTensorHandle output, Tensor& destination, size_t index,
                   OwnedTensor* staging) {
  int64_t dim = 0;
  int64_t* sizes = nullptr;
  int32_t dtype = 0;
  if (aoti_torch_get_dim(output, &dim) != 0 || aoti_torch_get_sizes(output, &sizes) != 0 ||
      aoti_torch_get_dtype(output, &dtype) != 0) {
    ET_LOG(Error, "etmetal MetalBackend: output %zu is unreadable: %s", index,
           runtime_error_text().c_str());
    return Error::Internal;
  }
  if (dtype != static_cast<int32_t>(destination.scalar_type())) {
    ET_LOG(Error, "etmetal MetalBackend: output %zu has dtype %" PRId32
                  ", the program expects %d", index, dtype,
           static_cast<int>(destination.scalar_type()));
    return Error::InvalidProgram;
  }
  std::vector<executorch::aten::SizesType> new_sizes(sizes, sizes + dim);
  Error resized = executorch::runtime::resize_tensor(
      destination, {new_sizes.data(), new_sizes.size()});
  if (resized != Error::Ok) {
    ET_LOG(Error, "etmetal MetalBackend: output %zu cannot take the model's shape "
                  "(dim %" PRId64 ")", index, dim);
    return resized;
  }
  if (destination.numel() == 0) return Error::Ok;
  Error error = new_device_tensor(destination, staging);
  if (error != Error::Ok) return error;
  if (aoti_torch_copy_(staging->get(), output, 0) != 0) {
    ET_LOG(Error, "etmetal MetalBackend: copying output %zu failed: %s", index,
           runtime_error_text().c_str());
    return Error::Internal;
  }
  return Error::Ok;
}

class EtmetalMetalBackend final : public BackendInterface {
 public:
  bool is_available() const override { return true; }

  Result<DelegateHandle*> init(BackendInitContext& context, FreeableBuffer* processed,
                               ArrayRef<CompileSpec> compile_specs) const override {
    Result<DelegateKeys> keys = delegate_keys(processed, compile_specs);
    if (!keys.ok()) return keys.error();
    if (processed != nullptr) processed->Free();
    const NamedDataMap* named_data = context.get_named_data_map();
    if (named_data == nullptr) {
      ET_LOG(Error, "etmetal MetalBackend: the program has no named data; the delegate needs "
                    "%s", keys->so.c_str());
      return Error::InvalidProgram;
    }
    std::unique_ptr<MetalDelegate> delegate(new (std::nothrow) MetalDelegate());
    if (delegate == nullptr) return Error::MemoryAllocationFailed;
    delegate->label = keys->so;

    {
      Result<FreeableBuffer> so = named_data->get_data(keys->so.c_str());
      if (!so.ok() || so->data() == nullptr || so->size() == 0) {
        ET_LOG(Error, "etmetal MetalBackend: named data %s (the model library) is missing",
               keys->so.c_str());
        return Error::NotFound;
      }
      std::string error;
      delegate->library = ModelLibrary::load(so->data(), so->size(), keys->so, &error);
      if (delegate->library == nullptr) {
        ET_LOG(Error, "etmetal MetalBackend: %s", error.c_str());
        return Error::InvalidProgram;
      }
    }
    const ContainerApi& api = delegate->library->api();
    if (api.create_with_device(&delegate->container, 1, "mps", nullptr) != 0 ||
        delegate->container == nullptr) {
      delegate->container = nullptr;
      ET_LOG(Error, "etmetal MetalBackend: creating the model container failed: %s",
             model_error_text(*delegate).c_str());
      return Error::Internal;
    }
    Error loaded = load_weights(*named_data, keys->weights, *delegate);
    if (loaded != Error::Ok) return loaded;
    if (api.num_inputs(delegate->container, &delegate->num_inputs) != 0 ||
        api.num_outputs(delegate->container, &delegate->num_outputs) != 0) {
      ET_LOG(Error, "etmetal MetalBackend: the model does not report its inputs and outputs");
      return Error::Internal;
    }
    return static_cast<DelegateHandle*>(delegate.release());
  }

  Error execute(BackendExecutionContext&, DelegateHandle* handle,
                Span<EValue*> args) const override {
    auto* delegate = static_cast<MetalDelegate*>(handle);
    if (args.size() != delegate->num_inputs + delegate->num_outputs) {
      ET_LOG(Error, "etmetal MetalBackend: the model takes %zu inputs and %zu outputs; the "
                    "program passes %zu values", delegate->num_inputs, delegate->num_outputs,
             args.size());
      return Error::InvalidProgram;
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i]->isTensor()) {
        ET_LOG(Error, "etmetal MetalBackend: argument %zu is not a tensor", i);
        return Error::InvalidArgument;
      }
    }
    // Run steals the input handles: wrapped inputs are released into it.
    std::vector<AtenTensorHandle> inputs(delegate->num_inputs, nullptr);
    for (size_t i = 0; i < delegate->num_inputs; ++i) {
      OwnedTensor wrapped;
      Error error = copy_input(args[i]->toTensor(), &wrapped);
      if (error != Error::Ok) {
        for (size_t j = 0; j < i; ++j) aoti_torch_delete_tensor_object(inputs[j]);
        return error;
      }
      inputs[i] = wrapped.release();
    }
    std::vector<AtenTensorHandle> raw_outputs(delegate->num_outputs, nullptr);
    AOTIRuntimeError ran = delegate->library->api().run(
        delegate->container, inputs.data(), inputs.size(), raw_outputs.data(),
        raw_outputs.size(), nullptr, nullptr);
    std::vector<OwnedTensor> outputs;
    outputs.reserve(raw_outputs.size());
    for (AtenTensorHandle output : raw_outputs) outputs.emplace_back(output);
    if (ran != 0) {
      // A failed run may leave encoded work behind; wait for it and clear the stream's error.
      etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT);
      ET_LOG(Error, "etmetal MetalBackend: running %s failed: %s", delegate->label.c_str(),
             model_error_text(*delegate).c_str());
      return Error::Internal;
    }
    Error result = Error::Ok;
    std::vector<OwnedTensor> staged(outputs.size());
    for (size_t i = 0; i < outputs.size() && result == Error::Ok; ++i) {
      if (outputs[i].get() == nullptr) {
        ET_LOG(Error, "etmetal MetalBackend: the model returned no output %zu", i);
        result = Error::Internal;
        break;
      }
      result = stage_output(outputs[i].get(), args[delegate->num_inputs + i]->toTensor(), i,
                            &staged[i]);
    }
    // One wait for the run and the output copies; it also reports errors of encoded work.
    if (etmetal_synchronize(ETMETAL_SYNC_COMMIT_AND_WAIT) != 0 && result == Error::Ok) {
      ET_LOG(Error, "etmetal MetalBackend: running %s failed: %s", delegate->label.c_str(),
             runtime_error_text().c_str());
      result = Error::Internal;
    }
    for (size_t i = 0; i < staged.size() && result == Error::Ok; ++i) {
      if (staged[i].get() == nullptr) continue;  // an empty output
      Tensor& destination = args[delegate->num_inputs + i]->toTensor();
      void* data = nullptr;
      result = device_bytes(staged[i].get(), &data);
      if (result == Error::Ok) std::memcpy(destination.mutable_data_ptr(), data, destination.nbytes());
    }
    return result;
  }

  void destroy(DelegateHandle* handle) const override {
    // Outputs of this delegate were copied out in execute; only its own objects go.
    delete static_cast<MetalDelegate*>(handle);
  }

 private:
  static Error load_weights(const NamedDataMap& named_data, const std::string& key,
                            MetalDelegate& delegate) {
    const ContainerApi& api = delegate.library->api();
    uint64_t expected = 0;
    if (api.constants_blob_size != nullptr &&
        api.constants_blob_size(delegate.container, &expected) != 0) {
      ET_LOG(Error, "etmetal MetalBackend: the model does not report its weights size: %s",
             model_error_text(delegate).c_str());
      return Error::Internal;
    }
    Result<FreeableBuffer> blob = named_data.get_data(key.c_str());
    if (!blob.ok()) {
      ET_LOG(Error, "etmetal MetalBackend: named data %s (the weights) is missing", key.c_str());
      return Error::NotFound;
    }
    if (blob->size() < expected) {
      ET_LOG(Error, "etmetal MetalBackend: weights %s hold %zu bytes; the model needs %" PRIu64,
             key.c_str(), blob->size(), expected);
      return Error::InvalidProgram;
    }
    // An empty blob stands for a model without weights; there is nothing to load.
    if (blob->size() == 0) return Error::Ok;
    // The container copies the weights into device memory; the blob can go afterwards.
    if (api.update_constants_from_blob(delegate.container,
                                       static_cast<const uint8_t*>(blob->data())) != 0) {
      ET_LOG(Error, "etmetal MetalBackend: loading the weights failed: %s",
             model_error_text(delegate).c_str());
      return Error::Internal;
    }
    return Error::Ok;
  }
};

EtmetalMetalBackend backend_instance;

// Registers at load, as ExecuTorch's own backends do. Fails (logged) when another library
// already registered "MetalBackend" in this process.
const Error registered = executorch::runtime::register_backend(
    Backend{kBackendName, &backend_instance});

}  // namespace
}  // namespace etmetal_executorch
