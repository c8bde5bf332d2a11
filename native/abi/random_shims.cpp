// c_shim_mps.h's random-number fallbacks and the default generator's seed
// (etmetal/fallback_random.h).
#include <memory>
#include <vector>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_random.h"
#include "ops/op_support.h"
#include "ops/random.h"

using etm::DType;
using etm::Tensor;
using etm::abi::check_factory_options;
using etm::abi::factory_dtype;
using etm::abi::guarded;
using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_factory_tensor;
using etm::abi::new_handle;
using etm::abi::require_default_generator;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

constexpr int32_t kFloat32 = static_cast<int32_t>(DType::float32);
constexpr int32_t kInt64 = static_cast<int32_t>(DType::int64);

// A random factory's body: after the checks, a new tensor of `size` filled by `fill`.
template <typename Fill>
AOTITorchError random_factory(const char* function, const int64_t* size, int64_t size_len,
                              const AtenGeneratorHandle* generator, const int32_t* dtype, int32_t default_dtype,
                              const int32_t* layout, const int32_t* device, int32_t device_index,
                              const int32_t* pin_memory, AtenTensorHandle* ret0, Fill fill) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    require_default_generator(generator);
    check_factory_options(layout, device, device_index, pin_memory);
    auto out = new_factory_tensor(int_list(size, size_len, "size"), factory_dtype(dtype, default_dtype));
    fill(*out);
    *ret0 = new_handle(std::move(out));
  });
}

// A random *_like function's body: a new contiguous tensor of self's shape and *dtype (else
// self's dtype) filled by `fill`.
template <typename Fill>
AOTITorchError random_like(const char* function, AtenTensorHandle self, const AtenGeneratorHandle* generator,
                           const int32_t* dtype, const int32_t* layout, const int32_t* device, int32_t device_index,
                           const int32_t* pin_memory, AtenTensorHandle* ret0, Fill fill) {
  return guarded_encoding(function, [&] {
    require_out(ret0, "ret0");
    require_default_generator(generator);
    check_factory_options(layout, device, device_index, pin_memory);
    const Tensor& source = tensor_of(self);
    auto out = new_factory_tensor(source.sizes, factory_dtype(dtype, source.dtype));
    fill(*out);
    *ret0 = new_handle(std::move(out));
  });
}

void fill_rand(const Tensor& out) { etm::ops::fill_uniform(out, 0.0, 1.0); }
void fill_randn(const Tensor& out) { etm::ops::fill_normal(out, 0.0, 1.0); }

}  // namespace

extern "C" AOTITorchError etmetal_manual_seed(uint64_t seed) {
  return guarded(__func__, [&] { etm::ops::manual_seed(seed); });
}

extern "C" AOTITorchError etmetal_initial_seed(uint64_t* seed) {
  return guarded(__func__, [&] { *require_out(seed, "seed") = etm::ops::initial_seed(); });
}

extern "C" AOTITorchError aoti_torch_mps_rand(const int64_t* size, int64_t size_len_, int32_t* dtype, int32_t* layout,
                                              int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                              AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, nullptr, dtype, kFloat32, layout, device, device_index_,
                        pin_memory, ret0, fill_rand);
}

extern "C" AOTITorchError aoti_torch_mps_rand_generator(const int64_t* size, int64_t size_len_,
                                                        AtenGeneratorHandle* generator, int32_t* dtype,
                                                        int32_t* layout, int32_t* device, int32_t device_index_,
                                                        int32_t* pin_memory, AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, generator, dtype, kFloat32, layout, device, device_index_,
                        pin_memory, ret0, fill_rand);
}

extern "C" AOTITorchError aoti_torch_mps_rand_like(AtenTensorHandle self, int32_t* dtype, int32_t* layout,
                                                   int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                                   int32_t* memory_format, AtenTensorHandle* ret0) {
  (void)memory_format;  // results are contiguous
  return random_like(__func__, self, nullptr, dtype, layout, device, device_index_, pin_memory, ret0, fill_rand);
}

extern "C" AOTITorchError aoti_torch_mps_rand_like_generator(AtenTensorHandle self, AtenGeneratorHandle* generator,
                                                             int32_t* dtype, int32_t* layout, int32_t* device,
                                                             int32_t device_index_, int32_t* pin_memory,
                                                             int32_t* memory_format, AtenTensorHandle* ret0) {
  (void)memory_format;
  return random_like(__func__, self, generator, dtype, layout, device, device_index_, pin_memory, ret0, fill_rand);
}

extern "C" AOTITorchError aoti_torch_mps_randn(const int64_t* size, int64_t size_len_, int32_t* dtype,
                                               int32_t* layout, int32_t* device, int32_t device_index_,
                                               int32_t* pin_memory, AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, nullptr, dtype, kFloat32, layout, device, device_index_,
                        pin_memory, ret0, fill_randn);
}

extern "C" AOTITorchError aoti_torch_mps_randn_generator(const int64_t* size, int64_t size_len_,
                                                         AtenGeneratorHandle* generator, int32_t* dtype,
                                                         int32_t* layout, int32_t* device, int32_t device_index_,
                                                         int32_t* pin_memory, AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, generator, dtype, kFloat32, layout, device, device_index_,
                        pin_memory, ret0, fill_randn);
}

extern "C" AOTITorchError aoti_torch_mps_randn_like(AtenTensorHandle self, int32_t* dtype, int32_t* layout,
                                                    int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                                    int32_t* memory_format, AtenTensorHandle* ret0) {
  (void)memory_format;
  return random_like(__func__, self, nullptr, dtype, layout, device, device_index_, pin_memory, ret0, fill_randn);
}

extern "C" AOTITorchError aoti_torch_mps_randn_like_generator(AtenTensorHandle self, AtenGeneratorHandle* generator,
                                                              int32_t* dtype, int32_t* layout, int32_t* device,
                                                              int32_t device_index_, int32_t* pin_memory,
                                                              int32_t* memory_format, AtenTensorHandle* ret0) {
  (void)memory_format;
  return random_like(__func__, self, generator, dtype, layout, device, device_index_, pin_memory, ret0, fill_randn);
}

extern "C" AOTITorchError aoti_torch_mps_randint(int64_t high, const int64_t* size, int64_t size_len_,
                                                 int32_t* dtype, int32_t* layout, int32_t* device,
                                                 int32_t device_index_, int32_t* pin_memory, AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, nullptr, dtype, kInt64, layout, device, device_index_, pin_memory,
                        ret0, [&](const Tensor& out) { etm::ops::fill_random_int(out, 0, high); });
}

extern "C" AOTITorchError aoti_torch_mps_randint_generator(int64_t high, const int64_t* size, int64_t size_len_,
                                                           AtenGeneratorHandle* generator, int32_t* dtype,
                                                           int32_t* layout, int32_t* device, int32_t device_index_,
                                                           int32_t* pin_memory, AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, generator, dtype, kInt64, layout, device, device_index_,
                        pin_memory, ret0, [&](const Tensor& out) { etm::ops::fill_random_int(out, 0, high); });
}

extern "C" AOTITorchError aoti_torch_mps_randint_low(int64_t low, int64_t high, const int64_t* size,
                                                     int64_t size_len_, int32_t* dtype, int32_t* layout,
                                                     int32_t* device, int32_t device_index_, int32_t* pin_memory,
                                                     AtenTensorHandle* ret0) {
  return random_factory(__func__, size, size_len_, nullptr, dtype, kInt64, layout, device, device_index_, pin_memory,
                        ret0, [&](const Tensor& out) { etm::ops::fill_random_int(out, low, high); });
}

extern "C" AOTITorchError aoti_torch_mps_randint_low_out(AtenTensorHandle out, int64_t low, int64_t high,
                                                         const int64_t* size, int64_t size_len_) {
  return guarded_encoding(__func__, [&] {
    const Tensor& target = tensor_of(out);
    const std::vector<int64_t> sizes = int_list(size, size_len_, "size");
    // torch resizes a mismatched out; a model's out buffers are planned with the right size.
    ETM_REQUIRE(sizes == target.sizes, "out has shape ", etm::ops::shape_text(target.sizes), ", not the size ",
                etm::ops::shape_text(sizes), " asked for (etmetal does not resize out tensors)");
    etm::ops::fill_random_int(target, low, high);
  });
}

extern "C" AOTITorchError aoti_torch_mps_randint_like(AtenTensorHandle self, int64_t high, int32_t* dtype,
                                                      int32_t* layout, int32_t* device, int32_t device_index_,
                                                      int32_t* pin_memory, int32_t* memory_format,
                                                      AtenTensorHandle* ret0) {
  (void)memory_format;
  return random_like(__func__, self, nullptr, dtype, layout, device, device_index_, pin_memory, ret0,
                     [&](const Tensor& out) { etm::ops::fill_random_int(out, 0, high); });
}

extern "C" AOTITorchError aoti_torch_mps_randint_like_low_dtype(AtenTensorHandle self, int64_t low, int64_t high,
                                                                int32_t* dtype, int32_t* layout, int32_t* device,
                                                                int32_t device_index_, int32_t* pin_memory,
                                                                int32_t* memory_format, AtenTensorHandle* ret0) {
  (void)memory_format;
  return random_like(__func__, self, nullptr, dtype, layout, device, device_index_, pin_memory, ret0,
                     [&](const Tensor& out) { etm::ops::fill_random_int(out, low, high); });
}

extern "C" AOTITorchError aoti_torch_mps_uniform(AtenTensorHandle self, double from, double to,
                                                 AtenGeneratorHandle* generator, AtenTensorHandle* ret0) {
  return random_like(__func__, self, generator, nullptr, nullptr, nullptr, -1, nullptr, ret0,
                     [&](const Tensor& out) { etm::ops::fill_uniform(out, from, to); });
}

extern "C" AOTITorchError aoti_torch_mps_normal_functional(AtenTensorHandle self, double mean, double std,
                                                           AtenGeneratorHandle* generator, AtenTensorHandle* ret0) {
  return random_like(__func__, self, generator, nullptr, nullptr, nullptr, -1, nullptr, ret0,
                     [&](const Tensor& out) { etm::ops::fill_normal(out, mean, std); });
}

extern "C" AOTITorchError aoti_torch_mps_exponential(AtenTensorHandle self, double lambd,
                                                     AtenGeneratorHandle* generator, AtenTensorHandle* ret0) {
  return random_like(__func__, self, generator, nullptr, nullptr, nullptr, -1, nullptr, ret0,
                     [&](const Tensor& out) { etm::ops::fill_exponential(out, lambd); });
}

extern "C" AOTITorchError aoti_torch_mps_bernoulli__float(AtenTensorHandle self, double p,
                                                          AtenGeneratorHandle* generator) {
  return guarded_encoding(__func__, [&] {
    require_default_generator(generator);
    etm::ops::fill_bernoulli(tensor_of(self), p, nullptr);
  });
}

extern "C" AOTITorchError aoti_torch_mps_bernoulli__Tensor(AtenTensorHandle self, AtenTensorHandle p,
                                                           AtenGeneratorHandle* generator) {
  return guarded_encoding(__func__, [&] {
    require_default_generator(generator);
    etm::ops::fill_bernoulli(tensor_of(self), 0.0, &tensor_of(p));
  });
}
