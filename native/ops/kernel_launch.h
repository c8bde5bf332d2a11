// Encoding one dispatch of an op's kernel on the calling thread's stream:
//
//   KernelLaunch(shader_kernel("matmul.metal", "gemm_f32"))
//       .tensor(0, out).tensor(1, a).tensor(2, b).value(3, params)
//       .threadgroups({groups_x, groups_y, 1}, {32, 4, 1});
#pragma once

#include <functional>
#include <string>
#include <type_traits>

#include "runtime/runtime.h"

namespace etm::ops {

class KernelLaunch {
 public:
  explicit KernelLaunch(KernelFunction& kernel)
      : kernel_(kernel), stream_(Runtime::get().current_stream()) {
    stream_.start_encoding(&kernel_);
  }
  // Ends the encoding, also when the op failed: the stream lets go of the bound buffers, so an
  // op's operands and temporaries are not kept alive until the thread's next kernel. One
  // launch per thread at a time.
  ~KernelLaunch() { stream_.start_encoding(nullptr); }
  KernelLaunch(const KernelLaunch&) = delete;
  KernelLaunch& operator=(const KernelLaunch&) = delete;

  // Binds the tensor's first element (its storage offset applied), or the element
  // `element_offset` past it.
  KernelLaunch& tensor(unsigned index, const Tensor& t, size_t element_offset = 0) {
    stream_.set_argument_buffer(&kernel_, index, t.storage->buffer, t.buffer_offset() + element_offset * t.itemsize());
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

  // Runs `check` after the dispatch completes; a non-empty message becomes the stream's
  // sticky error (for faults only the kernel can see, like an index out of range).
  KernelLaunch& completion_check(std::function<std::string()> check) {
    check_ = std::move(check);
    return *this;
  }

  void threads(device::Size3 grid, device::Size3 group) {
    attach_check();
    stream_.dispatch(&kernel_, grid, group);
  }
  void threadgroups(device::Size3 groups, device::Size3 group) {
    attach_check();
    stream_.dispatch_groups(&kernel_, groups, group);
  }

  uint32_t max_threads_per_group() const { return kernel_.max_threads_per_group(); }

 private:
  void attach_check() {
    if (check_) stream_.add_completion_check(std::move(check_));
  }

  KernelFunction& kernel_;
  Stream& stream_;
  std::function<std::string()> check_;
};

}  // namespace etm::ops
