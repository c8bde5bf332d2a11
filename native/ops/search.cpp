#include "ops/search.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/search.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "searchsorted";
constexpr const char* kShaderFile = "search.metal";

bool searchable(int32_t dtype) {
  return msl_element_type_name(dtype) && dtype != static_cast<int32_t>(DType::bool_);
}

bool is_float(int32_t dtype) { return is_floating(dtype); }

// torch.promote_types over the searchable dtypes.
int32_t promote(int32_t a, int32_t b) {
  if (a == b) return a;
  const int32_t f32 = static_cast<int32_t>(DType::float32), i16 = static_cast<int32_t>(DType::int16),
                u8 = static_cast<int32_t>(DType::uint8);
  if (is_float(a) && is_float(b)) return f32;  // float32 with a 16-bit float, or half with bfloat
  if (is_float(a) || is_float(b)) return is_float(a) ? a : b;
  if (a == u8 || b == u8) {
    const int32_t other = a == u8 ? b : a;
    return element_size(other) > 1 ? other : i16;
  }
  return element_size(a) >= element_size(b) ? a : b;
}

// `t` itself when it has `dtype`, else a converted copy (held in `holder`), made on the host
// once the stream is idle.
const Tensor& with_dtype(const Tensor& t, int32_t dtype, std::unique_ptr<Tensor>& holder) {
  if (t.dtype == dtype) return t;
  holder = Runtime::get().empty_tensor(t.sizes, contiguous_strides(t.sizes), dtype);
  Runtime::get().current_stream().wait_idle();
  copy_elements(*holder, t);
  return *holder;
}

}  // namespace

std::unique_ptr<Tensor> searchsorted(const Tensor& sequence_in, const Tensor& values_in, bool out_int32,
                                     bool right, const std::optional<std::string>& side,
                                     const Tensor* sorter) {
  require_mps(kOp, "sorted_sequence", sequence_in);
  require_mps(kOp, "self", values_in);
  for (const Tensor* t : {&sequence_in, &values_in}) {
    ETM_REQUIRE(searchable(t->dtype), kOp, ": dtype ", dtype_name(t->dtype),
                " is not supported (float32, float16, bfloat16, int64, int32, int16, int8, uint8)");
  }
  // Both sides are compared in their promoted dtype, as torch does.
  const int32_t common = promote(sequence_in.dtype, values_in.dtype);
  std::unique_ptr<Tensor> sequence_holder, values_holder;
  const Tensor& sequence = with_dtype(sequence_in, common, sequence_holder);
  const Tensor& values = with_dtype(values_in, common, values_holder);
  if (side) {
    ETM_REQUIRE(*side == "left" || *side == "right", kOp, ": side can only be 'left' or 'right', got '",
                *side, "'");
    ETM_REQUIRE(!(right && *side == "left"), kOp, ": side and right can't be set to opposites, got side of left "
                "while right was True");
    right = *side == "right";
  }
  const int64_t n = values.dim();
  ETM_REQUIRE(sequence.dim() >= 1, kOp, ": boundaries tensor must have at least 1 dimension");
  ETM_REQUIRE(n <= kSearchMaxDims, kOp, ": at most ", kSearchMaxDims, " dimensions are supported, not ", n);
  const bool rows = sequence.dim() > 1;
  if (rows) {
    bool leading_match = sequence.dim() == n;
    for (int64_t d = 0; leading_match && d + 1 < n; ++d) leading_match = sequence.sizes[d] == values.sizes[d];
    ETM_REQUIRE(leading_match, kOp, ": boundaries tensor should be 1 dimension or the first N-1 dimensions "
                "of boundaries tensor and input value tensor must match, but we got boundaries tensor ",
                shape_text(sequence.sizes), " and input value tensor ", shape_text(values.sizes));
  }
  if (sorter) {
    require_mps(kOp, "sorter", *sorter);
    ETM_REQUIRE(sorter->dtype == static_cast<int32_t>(DType::int64), kOp, ": sorter must be a tensor of "
                "long dtype, got ", dtype_name(sorter->dtype));
    ETM_REQUIRE(sorter->sizes == sequence.sizes, kOp, ": boundaries and sorter must have the same size, "
                "got ", shape_text(sequence.sizes), " and ", shape_text(sorter->sizes));
  }

  SearchParams p{};
  p.dims = static_cast<uint32_t>(n);
  p.right = right ? 1 : 0;
  p.has_sorter = sorter ? 1 : 0;
  p.length = checked_u32(kOp, sequence.sizes.back(), "boundaries length");
  p.sequence_stride = sequence.strides.back();
  p.sorter_stride = sorter ? sorter->strides.back() : 0;
  for (int64_t d = 0; d < n; ++d) {
    p.sizes[d] = checked_u32(kOp, values.sizes[d], "size");
    p.value_strides[d] = values.strides[d];
    if (rows && d + 1 < n) {
      p.row_strides[d] = sequence.strides[d];
      p.sorter_row_strides[d] = sorter ? sorter->strides[d] : 0;
    }
  }
  const uint32_t count = checked_u32(kOp, values.numel(), "number of values");

  Runtime& runtime = Runtime::get();
  auto output = runtime.empty_tensor(values.sizes, contiguous_strides(values.sizes),
                                     static_cast<int32_t>(out_int32 ? DType::int32 : DType::int64));
  if (count == 0) return output;
  std::shared_ptr<Tensor> bad_sorter = runtime.empty_tensor({1}, {1}, static_cast<int32_t>(DType::int32));
  Stream& stream = runtime.current_stream();
  stream.fill_buffer(bad_sorter->storage->buffer, bad_sorter->buffer_offset(), bad_sorter->itemsize(), 0);
  const std::string name = std::string("search_") + msl_element_type_name(values.dtype) +
                           (out_int32 ? "_int" : "_long");
  KernelLaunch launch(shader_kernel(kShaderFile, name));
  // Without a sorter the kernel never reads that slot: bind the sequence there.
  launch.tensor(0, values).tensor(1, sequence).tensor(2, sorter ? *sorter : sequence)
      .tensor(3, *output).tensor(4, *bad_sorter).value(5, p);
  if (sorter) {
    launch.completion_check([bad_sorter]() -> std::string {
      if (*reinterpret_cast<const int32_t*>(bad_sorter->data()) == 0) return {};
      return std::string(kOp) + ": sorter index out of range";
    });
  }
  const device::Size3 grid{count, 1, 1};
  launch.threads(grid, default_group(grid, launch));
  return output;
}

}  // namespace etm::ops
