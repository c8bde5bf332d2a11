// The in-place metadata fallbacks (etmetal/fallback_resize.h).
#include <optional>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_resize.h"
#include "ops/resize.h"

using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::tensor_of;

namespace {

std::optional<int32_t> optional_format(const int32_t* memory_format) {
  return memory_format ? std::optional<int32_t>(*memory_format) : std::nullopt;
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_resize_(AtenTensorHandle self, const int64_t* size, int64_t size_len_,
                                                int32_t* memory_format) {
  return guarded_encoding(__func__, [&] {
    etm::ops::resize(tensor_of(self), int_list(size, size_len_, "size"), optional_format(memory_format));
  });
}

extern "C" AOTITorchError aoti_torch_mps_resize_as_(AtenTensorHandle self, AtenTensorHandle the_template,
                                                   int32_t* memory_format) {
  return guarded_encoding(__func__, [&] {
    etm::ops::resize_as(tensor_of(self), tensor_of(the_template), optional_format(memory_format));
  });
}

extern "C" AOTITorchError aoti_torch_mps_set__source_Tensor(AtenTensorHandle self, AtenTensorHandle source) {
  return guarded_encoding(__func__, [&] { etm::ops::set_source(tensor_of(self), tensor_of(source)); });
}
