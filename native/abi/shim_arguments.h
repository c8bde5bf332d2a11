// Argument decoding shared by the fallback shims: int lists, and the dtype / layout / device /
// pin_memory / generator options of torch's factory functions.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "abi/guard.h"
#include "etmetal/aoti_shim.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::abi {

// The int list argument `name` (its values and the `_len_` argument AOTI passes beside them).
inline std::vector<int64_t> int_list(const int64_t* values, int64_t count, const char* name) {
  ETM_REQUIRE(count >= 0, name, " has negative length ", count);
  ETM_REQUIRE(values || count == 0, name, " is null with length ", count);
  return std::vector<int64_t>(values, values + count);
}

// The dtype a factory function creates: *dtype, or `fallback` when dtype is null.
inline int32_t factory_dtype(const int32_t* dtype, int32_t fallback) {
  if (!dtype) return fallback;
  ETM_REQUIRE(is_tensor_dtype(*dtype), "unsupported dtype ", *dtype);
  return *dtype;
}

// A factory function's new contiguous tensor; throws for a negative size.
inline std::unique_ptr<Tensor> new_factory_tensor(const std::vector<int64_t>& sizes, int32_t dtype) {
  for (int64_t s : sizes) ETM_REQUIRE(s >= 0, "negative dimension ", s, " in size");
  return Runtime::get().empty_tensor(sizes, contiguous_strides(sizes), dtype);
}

// Throws unless the options name a strided, unpinned tensor on etmetal's device (null: default).
inline void check_factory_options(const int32_t* layout, const int32_t* device, int32_t device_index,
                                  const int32_t* pin_memory) {
  ETM_REQUIRE(!layout || *layout == 0, "layout ", layout ? *layout : 0, " is not supported (strided only)");
  ETM_REQUIRE(!device || *device == kDeviceMps, "device type ", device ? *device : 0, " is not mps (",
              kDeviceMps, ")");
  require_device_index(device_index);
  ETM_REQUIRE(!pin_memory || *pin_memory == 0, "pin_memory is not supported on mps");
}

// Throws unless `generator` asks for the default generator (a null pointer or a null handle):
// the ABI has no function that creates a generator, so no other handle can be etmetal's.
inline void require_default_generator(const AtenGeneratorHandle* generator) {
  ETM_REQUIRE(!generator || !*generator, "generator handles are not supported: etmetal draws from its default "
              "generator (seeded with etmetal_manual_seed); pass no generator");
}

}  // namespace etm::abi
