// aoti_torch_mps_searchsorted_Tensor / _Scalar and aoti_torch_mps_bucketize_Tensor
// (etmetal/fallback_reductions.h).
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "abi/guard.h"
#include "etmetal/fallback_reductions.h"
#include "ops/op_support.h"
#include "ops/search.h"
#include "runtime/dtype.h"

using namespace etm;
using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

namespace {

std::optional<std::string> side_of(const char** side) {
  if (side == nullptr || *side == nullptr) return std::nullopt;
  return std::string(*side);
}

const Tensor* sorter_of(AtenTensorHandle* sorter) {
  return sorter == nullptr || *sorter == nullptr ? nullptr : &tensor_of(*sorter);
}

template <typename T>
void store(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
}

// A 0-dim mps tensor (fresh, so written from the host) for a Scalar searched in `sequence`:
// torch promotes (float sequence: the scalar in its dtype; integer sequence: float32 for a
// fractional scalar). For an integer
// sequence the scalar stays exact instead: the left search for v equals the left search for
// ceil(v), the right search for floor(v); NaN and values past the dtype's range are kept as
// float32, where torch compares them too.
std::unique_ptr<Tensor> scalar_value(const Tensor& sequence, double value, bool right) {
  int32_t dtype = sequence.dtype;
  double stored = value;
  if (!ops::is_floating(dtype)) {
    const double whole = right ? std::floor(value) : std::ceil(value);
    const bool fits = std::isfinite(whole) && whole >= -9.2e18 && whole <= 9.2e18;
    dtype = fits ? static_cast<int32_t>(DType::int64) : static_cast<int32_t>(DType::float32);
    stored = fits ? whole : value;
  }
  Runtime& runtime = Runtime::get();
  auto tensor = runtime.empty_tensor({}, {}, dtype);
  if (dtype == static_cast<int32_t>(DType::int64)) {
    store(tensor->data(), static_cast<int64_t>(stored));
  } else {
    // Rounded to float32 first, then (copy_elements) to a 16-bit float sequence's dtype.
    auto single = runtime.empty_tensor({}, {}, static_cast<int32_t>(DType::float32));
    store(single->data(), static_cast<float>(stored));
    copy_elements(*tensor, *single);
  }
  return tensor;
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_searchsorted_Tensor(AtenTensorHandle sorted_sequence,
                                                             AtenTensorHandle self, int32_t out_int32,
                                                             int32_t right, const char** side,
                                                             AtenTensorHandle* sorter,
                                                             AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(ops::searchsorted(tensor_of(sorted_sequence), tensor_of(self), out_int32 != 0,
                                         right != 0, side_of(side), sorter_of(sorter)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_searchsorted_Scalar(AtenTensorHandle sorted_sequence,
                                                             double self, int32_t out_int32,
                                                             int32_t right, const char** side,
                                                             AtenTensorHandle* sorter,
                                                             AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    const Tensor& sequence = tensor_of(sorted_sequence);
    ETM_REQUIRE(sequence.dim() == 1, "input value can be a scalar only when boundaries tensor "
                "dimension is 1, but we got boundaries tensor dim(", sequence.dim(), ")");
    const std::optional<std::string> chosen = side_of(side);
    const bool right_side = chosen ? *chosen == "right" : right != 0;
    auto value = scalar_value(sequence, self, right_side);
    *ret0 = new_handle(ops::searchsorted(sequence, *value, out_int32 != 0, right != 0, chosen,
                                         sorter_of(sorter)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_bucketize_Tensor(AtenTensorHandle self,
                                                          AtenTensorHandle boundaries,
                                                          int32_t out_int32, int32_t right,
                                                          AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    const Tensor& edges = tensor_of(boundaries);
    ETM_REQUIRE(edges.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", edges.dim(), ")");
    *ret0 = new_handle(ops::searchsorted(edges, tensor_of(self), out_int32 != 0, right != 0,
                                         std::nullopt, nullptr));
  });
}
