// shim.h's device-generic guard and stream functions (etmetal/aoti_shim.h). etmetal has one
// device, so a guard only checks the index; a stream handle names the calling thread's stream.
#include <cstdint>
#include <memory>

#include "abi/guard.h"
#include "etmetal/aoti_shim.h"

using etm::abi::guarded;
using etm::abi::handles;
using etm::abi::require_device_index;
using etm::abi::require_out;

extern "C" AOTITorchError aoti_torch_create_device_guard(int32_t device_index, DeviceGuardHandle* ret_guard) {
  return guarded(__func__, [&] {
    require_out(ret_guard, "ret_guard");
    require_device_index(device_index);
    auto guard = std::make_unique<etm::abi::DeviceGuard>();
    *ret_guard = reinterpret_cast<DeviceGuardHandle>(handles().device_guards.add(std::move(guard)));
  });
}

extern "C" AOTITorchError aoti_torch_delete_device_guard(DeviceGuardHandle guard) {
  return guarded(__func__, [&] { handles().device_guards.remove(guard); });
}

extern "C" AOTITorchError aoti_torch_device_guard_set_index(DeviceGuardHandle guard, int32_t device_index) {
  return guarded(__func__, [&] {
    handles().device_guards.get(guard);
    require_device_index(device_index);
  });
}

extern "C" AOTITorchError aoti_torch_get_current_device_index(int32_t* ret_device_index) {
  return guarded(__func__, [&] { *require_out(ret_device_index, "ret_device_index") = 0; });
}

extern "C" AOTITorchError aoti_torch_get_current_stream(int32_t device_index, StreamHandle* ret_stream) {
  return guarded(__func__, [&] {
    require_out(ret_stream, "ret_stream");
    require_device_index(device_index);
    auto stream = std::make_unique<etm::abi::StreamId>();
    // The thread's stream lives as long as the thread; its address identifies it meanwhile.
    stream->id = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&etm::Runtime::get().current_stream()));
    *ret_stream = reinterpret_cast<StreamHandle>(handles().streams.add(std::move(stream)));
  });
}

extern "C" AOTITorchError aoti_torch_stream_id(StreamHandle stream, int64_t* ret_stream_id) {
  return guarded(__func__, [&] {
    *require_out(ret_stream_id, "ret_stream_id") = handles().streams.get(stream)->id;
  });
}

extern "C" AOTITorchError aoti_torch_delete_stream(StreamHandle stream) {
  return guarded(__func__, [&] { handles().streams.remove(stream); });
}
