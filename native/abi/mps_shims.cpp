// aoti_torch_mps_* functions (etmetal/aoti_shim_mps.h).
#include <cstring>
#include <functional>
#include <vector>

#include "abi/guard.h"
#include "etmetal/aoti_shim_mps.h"
#include "etmetal/etmetal.h"
#include "runtime/dtype.h"

using namespace etm;
using etm::abi::guarded;
using etm::abi::guarded_encoding;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

KernelFunction& kernel_of(AOTIMetalKernelFunctionHandle handle, ThreadContext& context = thread_context) {
  return *abi::handles().kernels.get(handle, context);
}

// The allocation holding `pointer`; throws when it is not device memory.
BufferLocation device_location(const void* pointer, const char* what) {
  ETM_REQUIRE(pointer, what, " is null");
  BufferLocation location = Runtime::get().addresses().find(pointer);
  ETM_REQUIRE(location.buffer, what, " ", pointer, " is not inside a live device allocation");
  return location;
}

// Throws unless `length` bytes at `offset` past the pointer stay inside its allocation.
void require_within(const BufferLocation& location, size_t offset, size_t length,
                    const char* what) {
  ETM_REQUIRE(offset <= location.available && length <= location.available - offset, length,
              " bytes at offset ", offset, " of ", what, " run past the end of its allocation (",
              location.available, " bytes from ", what, ")");
}

void dispatch(KernelFunction& kernel, device::Size3 grid, const device::Size3* requested_group,
              ThreadContext& context = thread_context) {
  const uint64_t max_threads = kernel.max_threads_per_group();
  device::Size3 group = requested_group ? *requested_group : device::Size3{max_threads, 1, 1};
  Runtime::thread_stream(context).dispatch(&kernel, grid, group);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_create_shader_library(
    const char* metal_shader_source, AOTIMetalShaderLibraryHandle* library_handle) {
  return guarded_encoding(__func__, [&] {
    require_out(library_handle, "library_handle");
    ETM_REQUIRE(metal_shader_source, "metal_shader_source is null");
    std::shared_ptr<device::Library> library;
    const device::Status status =
        Runtime::get().device().new_library(metal_shader_source, &library);
    ETM_REQUIRE(status.ok() && library, "cannot compile the shader library: ", status.message());
    *library_handle = reinterpret_cast<AOTIMetalShaderLibraryHandle>(
        abi::handles().libraries.add(std::make_unique<ShaderLibrary>(
            std::move(library), ShaderLibrary::source_label(metal_shader_source))));
  });
}

extern "C" AOTITorchError aoti_torch_mps_delete_shader_library(
    AOTIMetalShaderLibraryHandle library_handle) {
  return guarded(__func__, [&] {
    abi::Handles& handles = abi::handles();
    std::unique_ptr<ShaderLibrary> library = handles.libraries.remove(library_handle);
    for (KernelFunction* kernel : library->kernels()) handles.kernels.withdraw(kernel);
  });
}

extern "C" AOTITorchError aoti_torch_mps_get_kernel_function(
    AOTIMetalShaderLibraryHandle library_handle, const char* kernel_name,
    AOTIMetalKernelFunctionHandle* function_handle) {
  return guarded_encoding(__func__, [&] {
    require_out(function_handle, "function_handle");
    ETM_REQUIRE(kernel_name, "kernel_name is null");
    abi::Handles& handles = abi::handles();
    KernelFunction* kernel = handles.libraries.get(library_handle)->kernel(kernel_name);
    *function_handle =
        reinterpret_cast<AOTIMetalKernelFunctionHandle>(handles.kernels.handle_for(kernel));
  });
}

extern "C" AOTITorchError etmetal_get_kernel_function_with_constants(
    AOTIMetalShaderLibraryHandle library_handle, const char* kernel_name,
    const etmetal_function_constant_t* constants, size_t count,
    AOTIMetalKernelFunctionHandle* function_handle) {
  return guarded_encoding(__func__, [&] {
    require_out(function_handle, "function_handle");
    ETM_REQUIRE(kernel_name, "kernel_name is null");
    ETM_REQUIRE(constants || count == 0, "constants is null");
    std::vector<device::FunctionConstantValue> values(count);
    for (size_t i = 0; i < count; ++i) {
      const etmetal_function_constant_t& c = constants[i];
      device::FunctionConstantValue& v = values[i];
      v.name = c.name ? c.name : "";
      v.index = c.index;
      switch (c.kind) {
        case ETMETAL_CONSTANT_BOOL:
          ETM_REQUIRE(c.int_value == 0 || c.int_value == 1, "constant ", i, ": a boolean is 0 or 1");
          v.kind = device::FunctionConstantValue::Kind::boolean;
          break;
        case ETMETAL_CONSTANT_INT: v.kind = device::FunctionConstantValue::Kind::integer; break;
        case ETMETAL_CONSTANT_FLOAT: v.kind = device::FunctionConstantValue::Kind::floating; break;
        default: ETM_REQUIRE(false, "constant ", i, ": unknown kind ", c.kind);
      }
      v.integer = c.int_value;
      v.floating = c.float_value;
    }
    abi::Handles& handles = abi::handles();
    KernelFunction* kernel = handles.libraries.get(library_handle)->kernel(kernel_name, values);
    *function_handle =
        reinterpret_cast<AOTIMetalKernelFunctionHandle>(handles.kernels.handle_for(kernel));
  });
}

extern "C" AOTITorchError aoti_torch_mps_start_encoding(AOTIMetalKernelFunctionHandle func) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    Runtime::thread_stream(context).start_encoding(&kernel_of(func, context));
  });
}

extern "C" AOTITorchError aoti_torch_mps_set_arg_tensor(AOTIMetalKernelFunctionHandle func,
                                                        unsigned idx, AtenTensorHandle tensor) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    KernelFunction& kernel = kernel_of(func, context);
    const Tensor& t = tensor_of(tensor, context);
    Stream& stream = Runtime::thread_stream(context);
    if (t.dim() == 0 && t.device_type == kDeviceCpu) {
      // A host scalar travels by value, as Metal's setBytes; MSL has no double.
      unsigned char* data = t.data();
      ETM_REQUIRE(data, "0-dim host tensor without data");
      if (t.dtype == static_cast<int32_t>(DType::float64)) {
        double value;
        std::memcpy(&value, data, sizeof value);
        const float narrowed = static_cast<float>(value);
        stream.set_argument_bytes(&kernel, idx, &narrowed, sizeof narrowed);
      } else {
        stream.set_argument_bytes(&kernel, idx, data, t.itemsize());
      }
      return;
    }
    // The kernel may reach what the tensor's views may: the allocation from its data pointer on.
    const size_t allocation_end = t.storage->buffer_offset + t.storage->capacity;
    const size_t offset = t.buffer_offset();
    stream.set_argument_buffer(&kernel, idx, t.storage->buffer, offset,
                               allocation_end > offset ? allocation_end - offset : 0);
  });
}

extern "C" AOTITorchError aoti_torch_mps_set_arg_int(AOTIMetalKernelFunctionHandle func,
                                                     unsigned idx, int64_t val) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    Runtime::thread_stream(context).set_argument_bytes(&kernel_of(func, context), idx, &val, sizeof val);
  });
}

extern "C" AOTITorchError aoti_torch_mps_dispatch_single(AOTIMetalKernelFunctionHandle func,
                                                         uint64_t length) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    KernelFunction& kernel = kernel_of(func, context);
    const uint64_t group = std::min<uint64_t>(length, kernel.max_threads_per_group());
    const device::Size3 group_size{group, 1, 1};
    dispatch(kernel, device::Size3{length, 1, 1}, &group_size, context);
  });
}

extern "C" AOTITorchError aoti_torch_mps_dispatch_single_with_group_size(
    AOTIMetalKernelFunctionHandle func, uint64_t length, uint64_t group_size) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    const device::Size3 group{group_size, 1, 1};
    dispatch(kernel_of(func, context), device::Size3{length, 1, 1}, &group, context);
  });
}

namespace {

device::Size3 grid_from(const uint64_t* length, size_t length_size) {
  ETM_REQUIRE(length, "length is null");
  ETM_REQUIRE(length_size >= 1 && length_size <= 3, "a dispatch has 1 to 3 dimensions, not ",
              length_size);
  return device::Size3{length[0], length_size > 1 ? length[1] : 1, length_size > 2 ? length[2] : 1};
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_dispatch_array(AOTIMetalKernelFunctionHandle func,
                                                        const uint64_t* length, size_t length_size) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    dispatch(kernel_of(func, context), grid_from(length, length_size), nullptr, context);
  });
}

extern "C" AOTITorchError aoti_torch_mps_dispatch_array_with_group_size(
    AOTIMetalKernelFunctionHandle func, const uint64_t* length, size_t length_size,
    const uint64_t* group_size, size_t group_size_size) {
  return guarded_encoding(__func__, [&] {
    ThreadContext& context = this_thread_context();
    KernelFunction& kernel = kernel_of(func, context);
    const device::Size3 grid = grid_from(length, length_size);
    if (group_size_size == 0) {
      dispatch(kernel, grid, nullptr, context);
      return;
    }
    ETM_REQUIRE(group_size, "group_size is null");
    ETM_REQUIRE(group_size_size == length_size, "group_size has ", group_size_size,
                " dimensions but the grid has ", length_size);
    const device::Size3 group = grid_from(group_size, group_size_size);
    dispatch(kernel, grid, &group, context);
  });
}

extern "C" AOTITorchError aoti_torch_mps_malloc(void** buffer, size_t num_bytes) {
  return guarded(__func__, [&] {
    require_out(buffer, "buffer");
    *buffer = nullptr;  // also on failure
    *buffer = Runtime::get().allocate_raw(num_bytes);
  });
}

extern "C" AOTITorchError aoti_torch_mps_free(void* ptr) {
  return guarded(__func__, [&] {
    if (!ptr) return;
    ETM_REQUIRE(Runtime::get().release_raw(ptr), "pointer ", ptr, " was not returned by aoti_torch_mps_malloc (or was freed already)");
  });
}

extern "C" AOTITorchError aoti_torch_mps_memcpy(void* buffer, size_t constant_offset,
                                                size_t bytes_read, size_t data_size,
                                                uint8_t* constants_start) {
  return guarded(__func__, [&] {
    if (data_size == 0) return;
    ETM_REQUIRE(constants_start, "constants_start is null");
    const BufferLocation target = device_location(buffer, "buffer");
    require_within(target, constant_offset, data_size, "buffer");
    ETM_REQUIRE(reinterpret_cast<uintptr_t>(constants_start) <= UINTPTR_MAX - bytes_read &&
                    reinterpret_cast<uintptr_t>(constants_start) + bytes_read <=
                        UINTPTR_MAX - data_size,
                "the source range wraps around the address space");
    std::memcpy(static_cast<unsigned char*>(buffer) + constant_offset, constants_start + bytes_read,
                data_size);
  });
}

extern "C" AOTITorchError aoti_torch_mps_copy_buffer(void* src_buffer, void* dst_buffer,
                                                     size_t data_size, size_t src_offset,
                                                     size_t dst_offset) {
  return guarded_encoding(__func__, [&] {
    const BufferLocation source = device_location(src_buffer, "src_buffer");
    const BufferLocation destination = device_location(dst_buffer, "dst_buffer");
    require_within(source, src_offset, data_size, "src_buffer");
    require_within(destination, dst_offset, data_size, "dst_buffer");
    Runtime::get().current_stream().copy_buffer(source.buffer, source.offset + src_offset,
                                                destination.buffer, destination.offset + dst_offset,
                                                data_size);
  });
}

extern "C" void aoti_torch_mps_shared_callback(AOTIMetalKernelFunctionHandle func,
                                               void* user_data) {
  guarded_encoding(__func__, [&] {
    ETM_REQUIRE(user_data, "user_data is null");
    auto* callback = static_cast<std::function<void(AOTIMetalKernelFunctionHandle)>*>(user_data);
    (*callback)(func);
  });
}

extern "C" AOTITorchError aoti_torch_mps_run_command_block(
    AOTIMetalKernelFunctionHandle func, aoti_torch_mps_command_block_callback_t callback,
    void* user_data) {
  return guarded_encoding(__func__, [&] {
    kernel_of(func);
    ETM_REQUIRE(callback, "callback is null");
    // The calling thread owns its stream, so running the block here serializes it with the
    // thread's other encoding.
    callback(func, user_data);
  });
}
