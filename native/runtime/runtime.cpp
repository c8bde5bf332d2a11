#include "runtime/runtime.h"

#include <cstdlib>

#include "device/settings.h"
#include "device/tls_model.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace etm {
namespace {

void require(const device::Status& status) { ETM_REQUIRE(status.ok(), status.message()); }

size_t pool_limit_bytes(const device::Device& device) {
  int64_t megabytes = -1;
  require(settings::read_integer("ETMETAL_POOL_MB", &megabytes));
  if (megabytes >= 0) return static_cast<size_t>(megabytes) << 20;
  return device.recommended_max_working_set_size() / 4;
}

bool runs_graph_fallbacks(const device::Device& device) {
  std::string choice = "mpsgraph";
  require(settings::read_choice("ETMETAL_FALLBACKS", &choice));
  return device.runs_graphs() && choice == "mpsgraph";
}

}  // namespace

std::string selected_device_kind() {
  std::string requested;
  require(settings::read_choice("ETMETAL_DEVICE", &requested));
  if (!requested.empty()) return requested;
  const auto kinds = device::available_device_kinds();
  return kinds.empty() ? std::string("cpu") : kinds.front();
}

Runtime::Runtime(std::unique_ptr<device::Device> device)
    : device_(std::move(device)),
      policy_(commit_policy_for(device_->architecture())),
      graph_fallbacks_(runs_graph_fallbacks(*device_)) {
  allocator_ = std::make_unique<Allocator>(*device_, addresses_, pool_limit_bytes(*device_));
}

Runtime& Runtime::get() {
  // A throwing initializer leaves the static uninitialized, so a later call retries.
  static Runtime* runtime = [] {
    require(settings::check_all());
    const std::string kind = selected_device_kind();
    std::unique_ptr<device::Device> device;
    const device::Status status = device::create_device(kind, &device);
    ETM_REQUIRE(status.ok() && device, "cannot create the ", kind, " device: ", status.message());
    log(LogLevel::info, concat("device: ", device->name()));
    return new Runtime(std::move(device));
  }();
  return *runtime;
}

Stream& Runtime::current_stream() {
  if (Stream* stream = thread_context.stream) return *stream;
  struct ThreadStream {
    std::unique_ptr<Stream> stream;
    ~ThreadStream() {
      stream.reset();
      thread_context.stream = nullptr;
    }
  };
  ETM_THREAD_LOCAL ThreadStream owner;
  if (!owner.stream) owner.stream = std::make_unique<Stream>(*device_, policy_, write_order_);
  thread_context.stream = owner.stream.get();
  return *owner.stream;
}

void* Runtime::allocate_raw(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  BufferPtr allocation = allocator_->allocate(nbytes);
  void* contents = allocation->contents();
  addresses_.add_owned(std::move(allocation), nbytes);
  return contents;
}

bool Runtime::release_raw(void* pointer) { return addresses_.release_owned(pointer) != nullptr; }

std::shared_ptr<Storage> Runtime::new_storage(size_t nbytes) {
  auto storage = std::make_shared<Storage>();
  storage->nbytes = nbytes;
  storage->capacity = nbytes;
  if (nbytes > 0) storage->buffer = allocator_->allocate(nbytes);
  return storage;
}

std::unique_ptr<Tensor> Runtime::empty_tensor(const std::vector<int64_t>& sizes,
                                              const std::vector<int64_t>& strides, int32_t dtype,
                                              int32_t device_type) {
  ETM_REQUIRE(is_tensor_dtype(dtype), "unsupported dtype ", dtype_name(dtype), " (code ", dtype, ")");
  ETM_REQUIRE(sizes.size() == strides.size(), "sizes and strides differ in length");
  const int64_t extent =
      checked_extent(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), 0);
  auto tensor = std::make_unique<Tensor>();
  tensor->storage = new_storage(storage_nbytes(extent, dtype));
  tensor->dtype = dtype;
  tensor->device_type = device_type;
  tensor->sizes = sizes;
  tensor->strides = strides;
  return tensor;
}

std::unique_ptr<Tensor> Runtime::blob_tensor(void* data, std::vector<int64_t> sizes,
                                             std::vector<int64_t> strides, int64_t storage_offset,
                                             int32_t dtype, int32_t device_type) {
  auto tensor = blob_tensor_in_place(data, std::move(sizes), std::move(strides), storage_offset,
                                     dtype, device_type);
  ETM_REQUIRE(tensor, "memory at ", data, " is not an etmetal allocation and the ",
              device_->kind(), " device cannot use it in place (Metal maps page-aligned memory, ",
              "the CPU device none); allocate it with aoti_torch_mps_malloc or ",
              "metal_allocate_buffer");
  return tensor;
}

std::unique_ptr<Tensor> Runtime::blob_tensor_in_place(void* data, std::vector<int64_t> sizes,
                                                      std::vector<int64_t> strides,
                                                      int64_t storage_offset, int32_t dtype,
                                                      int32_t device_type) {
  ETM_REQUIRE(is_tensor_dtype(dtype), "unsupported dtype ", dtype_name(dtype), " (code ", dtype, ")");
  ETM_REQUIRE(sizes.size() == strides.size(), "sizes and strides differ in length");
  const int64_t extent = checked_extent(static_cast<int64_t>(sizes.size()), sizes.data(),
                                        strides.data(), storage_offset);
  auto tensor = std::make_unique<Tensor>();
  tensor->storage = storage_for(data, storage_nbytes(extent, dtype));
  if (!tensor->storage) return nullptr;
  tensor->dtype = dtype;
  tensor->device_type = device_type;
  tensor->sizes = std::move(sizes);
  tensor->strides = std::move(strides);
  tensor->storage_offset = storage_offset;
  return tensor;
}

void Runtime::copy_tensor(const Tensor& dst, const Tensor& src) {
  Stream& stream = current_stream();
  if (dst.numel() == 0) return;
  const bool same_layout = dst.dtype == src.dtype && dst.sizes == src.sizes &&
                           dst.is_contiguous() && src.is_contiguous();
  if (same_layout) {
    stream.copy_buffer(src.storage->buffer, src.buffer_offset(), dst.storage->buffer,
                       dst.buffer_offset(), static_cast<size_t>(dst.numel()) * dst.itemsize());
    return;
  }
  stream.wait_idle();
  stream.wait_for_other_streams(dst.storage->buffer);
  stream.wait_for_other_streams(src.storage->buffer);
  copy_elements(dst, src);
}

std::shared_ptr<Storage> Runtime::storage_for(void* data, size_t nbytes) {
  auto storage = std::make_shared<Storage>();
  storage->nbytes = nbytes;
  if (!data) {
    ETM_REQUIRE(nbytes == 0, "null data pointer for a tensor of ", nbytes, " bytes");
    return storage;
  }
  BufferLocation location = addresses_.find(data);
  if (location.buffer) {
    ETM_REQUIRE(nbytes <= location.available, "tensor of ", nbytes, " bytes at ", data,
                " runs past the end of its allocation (", location.available, " bytes left)");
    storage->buffer = std::move(location.buffer);
    storage->buffer_offset = location.offset;
    storage->capacity = location.available;
    return storage;
  }
  if (nbytes == 0) return storage;
  ETM_REQUIRE(reinterpret_cast<uintptr_t>(data) <= UINTPTR_MAX - nbytes, "memory at ", data,
              " of ", nbytes, " bytes wraps around the address space");
  ETM_REQUIRE(!addresses_.overlaps(data, nbytes), "memory at ", data, " of ", nbytes,
              " bytes overlaps a device allocation it does not start in");
  BufferPtr wrapped;
  const device::Status status = device_->new_buffer_no_copy(data, nbytes, &wrapped);
  ETM_REQUIRE(status.ok(), "cannot use memory at ", data, " as device memory: ", status.message());
  if (!wrapped) return nullptr;
  storage->buffer = std::move(wrapped);
  storage->capacity = nbytes;
  return storage;
}

}  // namespace etm
