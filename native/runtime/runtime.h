// The process-wide runtime: the device, its memory, and each thread's
// stream. Created on first use and never destroyed (worker threads and completion handlers
// may still run while the process exits).
#pragma once

#include <memory>
#include <string>

#include "device/device.h"
#include "runtime/allocator.h"
#include "runtime/library.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"
#include "runtime/thread_context.h"

namespace etm {

class Runtime {
 public:
  // Throws etm::Error when no device can be created (the message says why).
  static Runtime& get();

  device::Device& device() { return *device_; }
  AddressMap& addresses() { return addresses_; }
  Allocator& allocator() { return *allocator_; }
  // The calling thread's stream, created on first use and finished when the thread exits.
  Stream& current_stream();
  // The same, for per-dispatch calls: once the thread has its stream, a read of its context
  // (no call, no guard of get()'s static).
  static Stream& thread_stream(ThreadContext& context = thread_context) {
    Stream* stream = context.stream;
    return stream ? *stream : get().current_stream();
  }
  const CommitPolicy& policy() const { return policy_; }
  // Whether fallback ops with a graph form (mm, bmm, conv2d) run it: the device runs graphs
  // and ETMETAL_FALLBACKS is not "msl".
  bool graph_fallbacks() const { return graph_fallbacks_; }

  // Tensor storage over caller memory: inside a live allocation it shares that allocation,
  // anywhere else the device wraps it in place; null where the device cannot use that memory
  // in place.
  std::shared_ptr<Storage> storage_for(void* data, size_t nbytes);
  std::shared_ptr<Storage> new_storage(size_t nbytes);
  // Device memory addressed by pointer only (malloc-style APIs): the address map owns it until
  // release_raw. 0 bytes gives null.
  void* allocate_raw(size_t nbytes);
  // Gives up an allocation of allocate_raw (or a registered mapping); false when `pointer` is
  // not the start of one. Tensors still using the memory keep it alive.
  bool release_raw(void* pointer);
  // A tensor with fresh storage sized for its layout. Throws for unsupported dtypes and
  // invalid layouts.
  std::unique_ptr<Tensor> empty_tensor(const std::vector<int64_t>& sizes,
                                       const std::vector<int64_t>& strides, int32_t dtype,
                                       int32_t device_type = kDeviceMps);
  // A tensor over memory at `data` (see storage_for); null where the device cannot use that
  // memory in place. Throws for unsupported dtypes and invalid layouts.
  std::unique_ptr<Tensor> blob_tensor_in_place(void* data, std::vector<int64_t> sizes,
                                               std::vector<int64_t> strides,
                                               int64_t storage_offset, int32_t dtype,
                                               int32_t device_type);
  // As blob_tensor_in_place, but memory the device cannot use in place throws too.
  std::unique_ptr<Tensor> blob_tensor(void* data, std::vector<int64_t> sizes,
                                      std::vector<int64_t> strides, int64_t storage_offset,
                                      int32_t dtype, int32_t device_type);
  // Copies src into dst (broadcast, dtype conversion) in the calling thread's stream order:
  // one blit where both are dense and laid out alike, else on the host once the work that
  // uses them is done.
  void copy_tensor(const Tensor& dst, const Tensor& src);

 private:
  explicit Runtime(std::unique_ptr<device::Device> device);

  std::unique_ptr<device::Device> device_;
  AddressMap addresses_;
  WriteOrder write_order_;
  std::unique_ptr<Allocator> allocator_;
  CommitPolicy policy_;
  bool graph_fallbacks_ = false;
};

// The device kind ETMETAL_DEVICE asks for, else the preferred one this build has.
std::string selected_device_kind();

}  // namespace etm
