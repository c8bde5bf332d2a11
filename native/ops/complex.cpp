#include "ops/complex.h"

#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/complex.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr int kMaxDims = static_cast<int>(kPolarMaxDims);

// The real dtype of a complex one's parts, and back.
int32_t part_dtype(int32_t complex_dtype) {
  switch (static_cast<DType>(complex_dtype)) {
    case DType::complex32: return static_cast<int32_t>(DType::float16);
    case DType::complex64: return static_cast<int32_t>(DType::float32);
    default: return static_cast<int32_t>(DType::float64);
  }
}

int32_t complex_of(int32_t real_dtype) {
  switch (static_cast<DType>(real_dtype)) {
    case DType::float16: return static_cast<int32_t>(DType::complex32);
    case DType::float32: return static_cast<int32_t>(DType::complex64);
    default: return static_cast<int32_t>(DType::complex128);
  }
}

bool has_complex_counterpart(int32_t dtype) {
  return dtype == static_cast<int32_t>(DType::float16) || dtype == static_cast<int32_t>(DType::float32) ||
         dtype == static_cast<int32_t>(DType::float64);
}

// Strides reading `t` broadcast to `shape` (trailing dimensions aligned).
void broadcast_strides(const Tensor& t, const std::vector<int64_t>& shape, int64_t* into) {
  const size_t lead = shape.size() - t.sizes.size();
  for (size_t d = 0; d < shape.size(); ++d) into[d] = d < lead || t.sizes[d - lead] == 1 ? 0 : t.strides[d - lead];
}

}  // namespace

std::unique_ptr<Tensor> view_as_real(const Tensor& self) {
  constexpr const char* op = "view_as_real";
  require_mps(op, "self", self);
  ETM_REQUIRE(is_complex_dtype(self.dtype), op, ": view_as_real is only supported for complex tensors, got ",
              dtype_name(self.dtype));
  auto view = std::make_unique<Tensor>(self);
  view->dtype = part_dtype(self.dtype);
  for (int64_t& stride : view->strides) stride *= 2;
  view->sizes.push_back(2);
  view->strides.push_back(1);
  view->storage_offset = self.storage_offset * 2;
  return view;
}

std::unique_ptr<Tensor> view_as_complex(const Tensor& self) {
  constexpr const char* op = "view_as_complex";
  require_mps(op, "self", self);
  ETM_REQUIRE(has_complex_counterpart(self.dtype), op,
              ": view_as_complex is only supported for half, float and double tensors, but got a tensor of "
              "scalar type: ", dtype_name(self.dtype));
  ETM_REQUIRE(self.dim() != 0, op, ": Input tensor must have one or more dimensions");
  ETM_REQUIRE(self.sizes.back() == 2, op, ": Tensor must have a last dimension of size 2");
  ETM_REQUIRE(self.strides.back() == 1, op, ": Tensor must have a last dimension with stride 1");
  ETM_REQUIRE(self.storage_offset % 2 == 0, op, ": Tensor must have a storage_offset divisible by 2");
  auto view = std::make_unique<Tensor>(self);
  view->dtype = complex_of(self.dtype);
  view->sizes.pop_back();
  view->strides.pop_back();
  for (int64_t& stride : view->strides) {
    ETM_REQUIRE(stride % 2 == 0, op, ": Tensor must have a stride divisible by 2 for all but last dimension");
    stride /= 2;
  }
  view->storage_offset = self.storage_offset / 2;
  return view;
}

std::unique_ptr<Tensor> polar(const Tensor& abs, const Tensor& angle) {
  constexpr const char* op = "polar";
  require_mps(op, "abs", abs);
  require_mps(op, "angle", angle);
  ETM_REQUIRE(abs.dtype == angle.dtype, op, ": Expected object of scalar type ", dtype_name(abs.dtype),
              " but got scalar type ", dtype_name(angle.dtype), " for second argument");
  ETM_REQUIRE(abs.dtype == static_cast<int32_t>(DType::float32), op, ": expects float32 inputs, got ",
              dtype_name(abs.dtype),
              abs.dtype == static_cast<int32_t>(DType::float64) ? " (Metal has no 64-bit floating point)"
                                                                : " (torch's polar takes float and double only)");
  std::vector<int64_t> shape(std::max(abs.sizes.size(), angle.sizes.size()), 1);
  for (const Tensor* t : {&abs, &angle}) {
    const size_t lead = shape.size() - t->sizes.size();
    for (size_t d = 0; d < t->sizes.size(); ++d) {
      int64_t& size = shape[lead + d];
      const int64_t own = t->sizes[d];
      ETM_REQUIRE(own == size || own == 1 || size == 1, op, ": The size of tensor a (", shape_text(abs.sizes),
                  ") must match the size of tensor b (", shape_text(angle.sizes), ") at non-singleton dimensions");
      if (size == 1) size = own;
    }
  }
  ETM_REQUIRE(shape.size() <= static_cast<size_t>(kMaxDims), op, ": at most ", kMaxDims,
              " dimensions are supported, got ", shape.size());
  std::vector<int64_t> abs_strides(shape.size()), angle_strides(shape.size());
  broadcast_strides(abs, shape, abs_strides.data());
  broadcast_strides(angle, shape, angle_strides.data());
  const std::vector<int64_t> out_strides = pointwise_output_strides(shape, {abs_strides.data(), angle_strides.data()});
  auto out = Runtime::get().empty_tensor(shape, out_strides, static_cast<int32_t>(DType::complex64));
  const int64_t count = out->numel();
  if (count == 0) return out;
  PolarParams p{};
  p.dims = static_cast<uint32_t>(shape.size());
  // The kernel walks the dimensions in the output's memory order and writes element `index`.
  const std::vector<size_t> order = dims_by_decreasing_stride(out_strides);
  for (size_t d = 0; d < shape.size(); ++d) {
    p.sizes[d] = checked_u32(op, shape[order[d]], "size");
    p.abs_strides[d] = abs_strides[order[d]];
    p.angle_strides[d] = angle_strides[order[d]];
  }
  KernelLaunch launch(shader_kernel("complex.metal", "polar"));
  launch.tensor(0, abs).tensor(1, angle).tensor(2, *out).value(3, p);
  const device::Size3 grid{checked_u32(op, count, "number of elements"), 1, 1};
  launch.threads(grid, default_group(grid, launch));
  return out;
}

}  // namespace etm::ops
