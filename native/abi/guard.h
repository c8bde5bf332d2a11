// Every extern "C" entry point runs its body through one of these guards: exceptions become
// return code 1 plus the thread's last-error message, and are logged. Nothing escapes.
// The error policy: the message is "<C function>: <what went wrong>", the function named once,
// here; code below the ABI never names C functions. A success leaves the thread's last error
// alone, as etmetal.h documents (callers read it after a failing call, while destructors such
// as Python's may make successful calls in between).
#pragma once

#include <exception>
#include <string>

#include "abi/handles.h"
#include "etmetal/aoti_shim.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::abi {

// `function` is null when `what` already names the function that failed.
inline AOTITorchError report_failure(const char* function, const char* what, bool poison) {
  const std::string message = function ? concat(function, ": ", what) : std::string(what);
  set_last_error(message);
  log(LogLevel::error, message);
  if (poison) {
    try {
      Runtime::get().current_stream().poison(message);
    } catch (...) {
      // No runtime, so no stream to poison: the returned code is all there is.
    }
  }
  return 1;
}

template <typename Body>
AOTITorchError guarded_call(const char* function, bool poison, Body&& body) noexcept {
  try {
    body();
    return 0;
  } catch (const AttributedError& error) {
    return report_failure(nullptr, error.what(), poison);
  } catch (const std::exception& error) {
    return report_failure(function, error.what(), poison);
  } catch (...) {
    return report_failure(function, "unknown exception", poison);
  }
}

// For calls whose failure the caller sees through the return code.
template <typename Body>
AOTITorchError guarded(const char* function, Body&& body) noexcept {
  return guarded_call(function, false, std::forward<Body>(body));
}

// For encoding calls whose return codes generated model code ignores: a failure also
// poisons the calling thread's stream so the next synchronize reports it.
template <typename Body>
AOTITorchError guarded_encoding(const char* function, Body&& body) noexcept {
  return guarded_call(function, true, std::forward<Body>(body));
}

template <typename T>
T* require_out(T* pointer, const char* name) {
  ETM_REQUIRE(pointer, name, " is null");
  return pointer;
}

// Throws unless `device_index` names etmetal's one device: 0, or -1 for the current one.
inline void require_device_index(int32_t device_index) {
  ETM_REQUIRE(device_index == 0 || device_index == -1, "device index ", device_index,
              " does not exist (etmetal has one device, index 0)");
}

// A device guard (aoti_torch_create_device_guard): with one device there is nothing to switch
// or restore.
struct DeviceGuard {};

// A stream handle (aoti_torch_get_current_stream): the calling thread's stream, by id only.
struct StreamId {
  int64_t id = 0;
};

// The live objects behind the ABI's handles. Never destroyed, like the runtime: static
// destructors of a model .so may still delete their handles while the process exits.
struct Handles {
  HandleRegistry<Tensor> tensors{"tensor"};
  HandleRegistry<ShaderLibrary> libraries{"shader library"};
  BorrowedHandles<KernelFunction> kernels{"kernel function"};
  HandleRegistry<DeviceGuard> device_guards{"device guard"};
  HandleRegistry<StreamId> streams{"stream"};
};

inline Handles& handles() {
  static Handles* live = new Handles;
  return *live;
}

// Any live tensor, also an undefined one (aoti_torch_new_uninitialized_tensor: no storage).
inline Tensor& any_tensor_of(AtenTensorHandle handle, ThreadContext& context = thread_context) {
  return *handles().tensors.get(handle, context);
}

// A live, defined tensor.
inline Tensor& tensor_of(AtenTensorHandle handle, ThreadContext& context = thread_context) {
  Tensor& tensor = any_tensor_of(handle, context);
  ETM_REQUIRE(tensor.storage, "undefined tensor (from aoti_torch_new_uninitialized_tensor)");
  return tensor;
}

inline AtenTensorHandle new_handle(std::unique_ptr<Tensor> tensor) {
  return reinterpret_cast<AtenTensorHandle>(handles().tensors.add(std::move(tensor)));
}

}  // namespace etm::abi
