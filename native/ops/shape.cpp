#include "ops/shape.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/shape.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "shape.metal";

// Must match the modes of shaders/shape.metal.
enum class PadMode : uint32_t { constant = 0, reflect = 1, replicate = 2, circular = 3, fill = 4 };

// Writes dst (sizes and strides its own) from src (as many dims) through shaders/shape.metal's
// pad_copy: dst coordinate c reads src at c - before[d], mapped by `mode`.
void pad_copy(const char* op, const Tensor& dst, const Tensor& src, const std::vector<int64_t>& before,
              PadMode mode, uint64_t fill) {
  if (dst.numel() == 0) return;
  const size_t item = dst.itemsize();
  ETM_REQUIRE(item == 1 || item == 2 || item == 4 || item == 8, op, ": dtype ", dtype_name(dst.dtype),
              " is not supported (elements of 1, 2, 4 or 8 bytes)");
  ETM_REQUIRE(dst.dim() <= kShapeMaxDims, op, ": at most ", kShapeMaxDims, " dimensions are supported, not ",
              dst.dim());
  PadParams p{};
  p.dims = static_cast<uint32_t>(dst.dim());
  p.numel = checked_u32(op, dst.numel(), "number of elements");
  p.mode = static_cast<uint32_t>(mode);
  p.fill = fill;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    p.src_strides[d] = src.strides[d];
    p.dst_strides[d] = dst.strides[d];
    p.before[d] = before[d];
    p.src_sizes[d] = checked_u32(op, src.sizes[d], "size");
    p.dst_sizes[d] = checked_u32(op, dst.sizes[d], "size");
  }
  KernelLaunch launch(shader_kernel(kShaderFile, "pad_copy_" + std::to_string(item)));
  const device::Size3 grid{p.numel, 1, 1};
  // An empty source (constant padding of an empty tensor) may have no buffer; it is never read.
  launch.tensor(0, dst).tensor(1, src.numel() == 0 ? dst : src).value(2, p).threads(grid, default_group(grid, launch));
}

// `value` converted to `dtype`, as the bits of one element in the low bytes.
uint64_t element_bits(double value, int32_t dtype) {
  uint64_t bits = 0;
  convert_elements(&value, static_cast<int32_t>(DType::float64), &bits, dtype, 1);
  return bits;
}

std::unique_ptr<Tensor> empty_like_contiguous(const Tensor& self, const std::vector<int64_t>& sizes) {
  return Runtime::get().empty_tensor(sizes, contiguous_strides(sizes), self.dtype);
}

int64_t numel_of(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// torch's infer_size: `shape` with its -1 resolved against numel.
std::vector<int64_t> inferred_shape(const std::vector<int64_t>& shape, int64_t numel) {
  std::vector<int64_t> result = shape;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ETM_REQUIRE(!infer, "reshape: only one dimension can be inferred");
      infer = i;
    } else {
      ETM_REQUIRE(shape[i] >= 0, "reshape: invalid shape dimension ", shape[i]);
      known *= shape[i];
    }
  }
  ETM_REQUIRE(!(infer && known == 0), "reshape: cannot reshape a tensor of ", numel, " elements into shape ",
              shape_text(shape), " because the unspecified dimension size -1 can be any value");
  const bool fits = infer ? numel % known == 0 : known == numel;
  ETM_REQUIRE(fits, "reshape: shape '", shape_text(shape), "' is invalid for input of size ", numel);
  if (infer) result[*infer] = numel / known;
  return result;
}

// The strides of a view of (sizes, strides) with new_sizes, when one exists (ATen's rule:
// each run of dimensions that are contiguous among themselves may be split or merged).
std::optional<std::vector<int64_t>> view_strides(const std::vector<int64_t>& sizes,
                                                 const std::vector<int64_t>& strides,
                                                 const std::vector<int64_t>& new_sizes) {
  if (sizes.empty() || numel_of(sizes) == 0) return contiguous_strides(new_sizes);
  std::vector<int64_t> result(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    const bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      result[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return result;
}

PadMode pad_mode(const std::string& mode) {
  if (mode == "constant") return PadMode::constant;
  if (mode == "reflect") return PadMode::reflect;
  if (mode == "replicate") return PadMode::replicate;
  if (mode == "circular") return PadMode::circular;
  fail("pad: unrecognised padding mode '", mode, "' (constant, reflect, replicate, circular)");
}

}  // namespace

std::unique_ptr<Tensor> cat(const std::vector<const Tensor*>& tensors, int64_t dim) {
  constexpr const char* op = "cat";
  ETM_REQUIRE(!tensors.empty(), op, ": expected a non-empty list of tensors");
  std::vector<const Tensor*> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    require_mps(op, "tensors", *tensors[i]);
    ETM_REQUIRE(tensors[i]->dtype == tensors[0]->dtype, op, ": tensor ", i, " has dtype ",
                dtype_name(tensors[i]->dtype), ", tensor 0 ", dtype_name(tensors[0]->dtype),
                "; all must have the same dtype");
    // torch skips 1-D empty tensors (a legacy of cat's old shape rules).
    if (!(tensors[i]->dim() == 1 && tensors[i]->sizes[0] == 0)) parts.push_back(tensors[i]);
  }
  if (parts.empty()) return empty_like_contiguous(*tensors[0], {0});
  const Tensor& first = *parts[0];
  ETM_REQUIRE(first.dim() > 0, op, ": zero-dimensional tensor (at position 0) cannot be concatenated");
  dim = wrap_dim(op, dim, first.dim());
  std::vector<int64_t> sizes = first.sizes;
  sizes[dim] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    ETM_REQUIRE(t.dim() == first.dim(), op, ": tensors must have the same number of dimensions: got ",
                first.dim(), " and ", t.dim());
    for (int64_t d = 0; d < first.dim(); ++d) {
      ETM_REQUIRE(d == dim || t.sizes[d] == first.sizes[d], op, ": sizes of tensors must match except in "
                  "dimension ", dim, ". Expected size ", first.sizes[d], " but got size ", t.sizes[d],
                  " for tensor number ", i, " in the list");
    }
    sizes[dim] += t.sizes[dim];
  }
  auto out = empty_like_contiguous(first, sizes);
  const std::vector<int64_t> no_padding(first.dim(), 0);
  int64_t offset = 0;
  for (const Tensor* t : parts) {
    Tensor target = *out;
    target.sizes[dim] = t->sizes[dim];
    target.storage_offset += offset * out->strides[dim];
    pad_copy(op, target, *t, no_padding, PadMode::constant, 0);
    offset += t->sizes[dim];
  }
  return out;
}

std::unique_ptr<Tensor> pad(const Tensor& self, const std::vector<int64_t>& pad, const std::string& mode_name,
                            std::optional<double> value) {
  constexpr const char* op = "pad";
  require_mps(op, "self", self);
  const PadMode mode = pad_mode(mode_name);
  const int64_t n = self.dim();
  const int64_t padded = static_cast<int64_t>(pad.size()) / 2;
  ETM_REQUIRE(pad.size() % 2 == 0, op, ": padding length must be divisible by 2");
  ETM_REQUIRE(padded <= n, op, ": padding length should be at most twice the input's dimensions (",
              pad.size(), " pads for ", n, " dims)");
  if (mode != PadMode::constant) {
    ETM_REQUIRE(!value || *value == 0.0, op, ": padding mode \"", mode_name,
                "\" doesn't take in value argument");
    ETM_REQUIRE(padded >= 1 && padded <= 3 && n >= padded + 1 && n <= padded + 2, op, ": ", mode_name,
                " padding of ", padded, " dims needs a ", padded + 1, "-D or ", padded + 2,
                "-D input, got ", n, "-D (only 2D, 3D, 4D, 5D padding with non-constant padding is "
                "supported)");
  }
  std::vector<int64_t> before(n, 0), sizes = self.sizes;
  for (int64_t i = 0; i < padded; ++i) {
    const int64_t d = n - 1 - i;
    const int64_t low = pad[2 * i], high = pad[2 * i + 1];
    if (mode != PadMode::constant) {
      ETM_REQUIRE(low >= 0 && high >= 0, op, ": ", mode_name, " padding must not be negative, got (", low,
                  ", ", high, ") for dim ", d);
      ETM_REQUIRE(self.sizes[d] > 0, op, ": ", mode_name, " padding needs dim ", d,
                  " to be non-empty");
    }
    if (mode == PadMode::reflect) {
      ETM_REQUIRE(low < self.sizes[d] && high < self.sizes[d], op, ": padding size should be less than the "
                  "corresponding input dimension, but got padding (", low, ", ", high, ") at dim ", d,
                  " of input ", shape_text(self.sizes));
    }
    if (mode == PadMode::circular) {
      ETM_REQUIRE(low <= self.sizes[d] && high <= self.sizes[d], op, ": padding value causes wrapping "
                  "around more than once (padding (", low, ", ", high, ") at dim ", d, " of size ",
                  self.sizes[d], ")");
    }
    before[d] = low;
    sizes[d] = self.sizes[d] + low + high;
    ETM_REQUIRE(sizes[d] >= 0, op, ": the input size ", self.sizes[d], ", plus negative padding ", low,
                " and ", high, " resulted in a negative output size, which is invalid. Check dimension ",
                d, " of your input.");
  }
  auto out = empty_like_contiguous(self, sizes);
  pad_copy(op, *out, self, before, mode, element_bits(value.value_or(0.0), self.dtype));
  return out;
}

std::unique_ptr<Tensor> reshape(const Tensor& self, const std::vector<int64_t>& shape) {
  require_mps("reshape", "self", self);
  const std::vector<int64_t> sizes = inferred_shape(shape, self.numel());
  if (auto strides = view_strides(self.sizes, self.strides, sizes)) {
    auto view = std::make_unique<Tensor>(self);
    view->sizes = sizes;
    view->strides = *strides;
    return view;
  }
  auto copy = empty_like_contiguous(self, self.sizes);
  pad_copy("reshape", *copy, self, std::vector<int64_t>(self.dim(), 0), PadMode::constant, 0);
  copy->sizes = sizes;
  copy->strides = contiguous_strides(sizes);
  return copy;
}

void fill(const Tensor& self, double value) {
  require_mps("fill_", "self", self);
  const DType dtype = static_cast<DType>(self.dtype);
  const bool integer = dtype == DType::uint8 || dtype == DType::int8 || dtype == DType::int16 ||
                       dtype == DType::int32 || dtype == DType::int64;
  if (integer) {
    // torch's checked conversion: an integer target refuses values outside [min, max].
    const int bits = static_cast<int>(8 * self.itemsize());
    const double low = dtype == DType::uint8 ? 0.0 : -std::ldexp(1.0, bits - 1);
    const double end = dtype == DType::uint8 ? 256.0 : std::ldexp(1.0, bits - 1);  // max + 1
    const bool fits = value >= low && (dtype == DType::int64 ? value < end : value <= end - 1.0);
    ETM_REQUIRE(fits, "fill_: value ", value, " cannot be converted to type ", dtype_name(self.dtype),
                " without overflow");
  }
  pad_copy("fill_", self, self, std::vector<int64_t>(self.dim(), 0), PadMode::fill, element_bits(value, self.dtype));
}

std::unique_ptr<Tensor> permute(const Tensor& self, const std::vector<int64_t>& dims) {
  constexpr const char* op = "permute";
  require_mps(op, "self", self);
  const int64_t n = self.dim();
  ETM_REQUIRE(static_cast<int64_t>(dims.size()) == n, op, ": number of dims don't match in permute: the "
              "input has ", n, " dims, the ordering ", dims.size());
  auto view = std::make_unique<Tensor>(self);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = wrap_dim(op, dims[i], n);
    ETM_REQUIRE(!seen[d], op, ": duplicate dims are not allowed (dim ", d, ")");
    seen[d] = true;
    view->sizes[i] = self.sizes[d];
    view->strides[i] = self.strides[d];
  }
  return view;
}

std::unique_ptr<Tensor> narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length) {
  constexpr const char* op = "narrow";
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() > 0, op, ": cannot be applied to a 0-dim tensor");
  ETM_REQUIRE(length >= 0, op, ": length must be non-negative, got ", length);
  dim = wrap_dim(op, dim, self.dim());
  const int64_t size = self.sizes[dim];
  ETM_REQUIRE(start >= -size && start <= size, op, ": start out of range (expected to be in range of [",
              -size, ", ", size, "], but got ", start, ")");
  if (start < 0) start += size;
  ETM_REQUIRE(start <= size - length, op, ": start (", start, ") + length (", length,
              ") exceeds dimension size (", size, ")");
  auto view = std::make_unique<Tensor>(self);
  view->storage_offset += start * self.strides[dim];
  view->sizes[dim] = length;
  return view;
}

std::unique_ptr<Tensor> slice(const Tensor& self, int64_t dim, std::optional<int64_t> start_in,
                              std::optional<int64_t> end_in, int64_t step) {
  constexpr const char* op = "slice";
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() > 0, op, ": cannot be applied to a 0-dim tensor");
  ETM_REQUIRE(step > 0, op, ": slice step must be positive, got ", step);
  dim = wrap_dim(op, dim, self.dim());
  const int64_t size = self.sizes[dim];
  auto clamp_bound = [size](int64_t v) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return std::min(v, size);
  };
  const int64_t start = clamp_bound(start_in.value_or(0));
  const int64_t end = std::max(start, clamp_bound(end_in.value_or(size)));
  auto view = std::make_unique<Tensor>(self);
  view->storage_offset += start * self.strides[dim];
  view->sizes[dim] = (end - start + step - 1) / step;
  view->strides[dim] = self.strides[dim] * step;
  return view;
}

std::unique_ptr<Tensor> squeeze_dim(const Tensor& self, int64_t dim) {
  require_mps("squeeze", "self", self);
  dim = wrap_dim("squeeze", dim, self.dim());
  auto view = std::make_unique<Tensor>(self);
  if (self.dim() > 0 && self.sizes[dim] == 1) {
    view->sizes.erase(view->sizes.begin() + dim);
    view->strides.erase(view->strides.begin() + dim);
  }
  return view;
}

std::unique_ptr<Tensor> view_dtype(const Tensor& self, int32_t dtype) {
  constexpr const char* op = "view(dtype)";
  require_mps(op, "self", self);
  ETM_REQUIRE(is_tensor_dtype(dtype), op, ": unsupported dtype ", dtype);
  auto view = std::make_unique<Tensor>(self);
  view->dtype = dtype;
  const int64_t old_size = static_cast<int64_t>(element_size(self.dtype));
  const int64_t new_size = static_cast<int64_t>(element_size(dtype));
  if (old_size == new_size) return view;
  const std::string what = std::string(dtype_name(self.dtype)) + " as " + dtype_name(dtype);
  ETM_REQUIRE(self.dim() > 0, op, ": self.dim() cannot be 0 to view ", what, " (different element sizes)");
  const int64_t last = self.dim() - 1;
  ETM_REQUIRE(self.strides[last] == 1, op, ": self.stride(-1) must be 1 to view ", what,
              " (different element sizes), but got ", self.strides[last]);
  if (new_size < old_size) {
    const int64_t ratio = old_size / new_size;
    for (int64_t d = 0; d < last; ++d) view->strides[d] = self.strides[d] * ratio;
    view->sizes[last] = self.sizes[last] * ratio;
    view->storage_offset = self.storage_offset * ratio;
    return view;
  }
  const int64_t ratio = new_size / old_size;
  ETM_REQUIRE(self.sizes[last] % ratio == 0, op, ": self.size(-1) must be divisible by ", ratio,
              " to view ", what, " (different element sizes), but got ", self.sizes[last]);
  ETM_REQUIRE(self.storage_offset % ratio == 0, op, ": self.storage_offset() must be divisible by ", ratio,
              " to view ", what, " (different element sizes), but got ", self.storage_offset);
  for (int64_t d = 0; d < last; ++d) {
    ETM_REQUIRE(self.strides[d] % ratio == 0, op, ": self.stride(", d, ") must be divisible by ", ratio,
                " to view ", what, " (different element sizes), but got ", self.strides[d]);
    view->strides[d] = self.strides[d] / ratio;
  }
  view->sizes[last] = self.sizes[last] / ratio;
  view->storage_offset = self.storage_offset / ratio;
  return view;
}

}  // namespace etm::ops
