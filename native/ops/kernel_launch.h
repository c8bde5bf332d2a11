// Encoding one dispatch of an op's kernel on the calling thread's stream:
//
//   KernelLaunch(shader_kernel("matmul.metal", "gemm_f32"))
//       .tensor(0, out).tensor(1, a).tensor(2, b).value(3, params)
//       .threadgroups({groups_x, groups_y, 1}, {32, 4, 1});
#pragma once

#include <type_traits>

#include "runtime/runtime.h"

namespace etm::ops {

class KernelLaunch {
 public:
  explicit KernelLaunch(KernelFunction& kernel)
      : kernel_(kernel), stream_(Runtime::get().current_stream()) {
    stream_.start_encoding(&kernel_);
  }

  // Binds the tensor's first element (its storage offset applied).
  KernelLaunch& tensor(unsigned index, const Tensor& t) {
    const size_t offset = t.storage->buffer_offset + t.storage_offset * t.itemsize();
    stream_.set_argument_buffer(&kernel_, index, t.storage->buffer, offset);
    return *this;
  }

  // Passes a trivially copyable value (a scalar or a parameter struct) by value.
  template <typename T>
  KernelLaunch& value(unsigned index, const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied as bytes");
    stream_.set_argument_bytes(&kernel_, index, &v, sizeof(T));
    return *this;
  }

  KernelLaunch& threadgroup_memory(unsigned index, size_t bytes) {
    stream_.set_threadgroup_memory(&kernel_, index, bytes);
    return *this;
  }

  void threads(device::Size3 grid, device::Size3 group) { stream_.dispatch(&kernel_, grid, group); }
  void threadgroups(device::Size3 groups, device::Size3 group) {
    stream_.dispatch_groups(&kernel_, groups, group);
  }

  uint32_t max_threads_per_group() const { return kernel_.max_threads_per_group(); }

 private:
  KernelFunction& kernel_;
  Stream& stream_;
};

}  // namespace etm::ops
