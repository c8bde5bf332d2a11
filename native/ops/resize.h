// In-place metadata ops of c_shim_mps.h: resize_, resize_as_ and set_.source_Tensor, ATen
// semantics on etmetal's tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/tensor.h"

namespace etm::ops {

// Gives self `sizes` with contiguous strides, or channels-last ones for memory_format 2 (4-D) or
// 3 (channels_last_3d, 5-D), keeping its storage offset and dtype. A storage too small for the
// new extent is replaced, for every view sharing it, by a new allocation holding its bytes, in
// stream order (also for storages over caller memory, where torch refuses); the added elements
// are uninitialized. Preserve (1) is refused, as torch does.
void resize(Tensor& self, const std::vector<int64_t>& sizes, std::optional<int32_t> memory_format);

// resize to the template's sizes; memory_format preserve (1) takes the template's layout
// (channels-last when its strides are, else contiguous); none: contiguous.
void resize_as(Tensor& self, const Tensor& the_template, std::optional<int32_t> memory_format);

// self becomes a view of source's storage with source's sizes, strides and offset (same dtype).
void set_source(Tensor& self, const Tensor& source);

}  // namespace etm::ops
