#include "ops/pooling3d.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/pooling3d.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// The (D, H, W) triple a one- or three-value argument stands for; `fallback`'s when it is
// empty and a fallback is given.
void triple_of(const char* op, const char* name, const std::vector<int64_t>& values, int32_t* into,
               const std::vector<int64_t>* fallback = nullptr) {
  const std::vector<int64_t>& source = values.empty() && fallback ? *fallback : values;
  ETM_REQUIRE(source.size() == 1 || source.size() == 3, op, ": ", name,
              " must either be a single int, or a tuple of three ints");
  for (int i = 0; i < 3; ++i) {
    const int64_t value = source[source.size() == 1 ? 0 : i];
    ETM_REQUIRE(value >= 0 && value <= INT32_MAX, op, ": ", name, " value ", value, " is out of range");
    into[i] = static_cast<int32_t>(value);
  }
}

// Strides [batch, channel, d, h, w] of a batched or unbatched tensor with `spatial` (2 or 3)
// trailing dimensions; a missing batch or depth dimension gets stride 0.
void plane_strides(const Tensor& t, int spatial, int64_t* into) {
  const int64_t dims = t.dim();
  const bool batched = dims == spatial + 2;
  into[0] = batched ? t.strides[0] : 0;
  into[1] = t.strides[dims - spatial - 1];
  into[2] = spatial == 3 ? t.strides[dims - 3] : 0;
  into[3] = t.strides[dims - 2];
  into[4] = t.strides[dims - 1];
}

// Checks a 3-D pooling's input and window (torch's pool3d_shape_check), fills the geometry of
// `p` and returns the output sizes.
std::vector<int64_t> plan_pool3d(const char* op, const Tensor& self, const std::vector<int64_t>& kernel_size,
                                 const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                 const std::vector<int64_t>& dilation, bool ceil_mode, Pool3dParams& p) {
  require_mps(op, "self", self);
  ETM_REQUIRE(self.dim() == 4 || self.dim() == 5, op, ": Expected 4D or 5D (batch mode) tensor for input, got ",
              self.dim(), " dimensions");
  triple_of(op, "kernel_size", kernel_size, p.window);
  triple_of(op, "stride", stride, p.stride, &kernel_size);
  triple_of(op, "padding", padding, p.padding);
  triple_of(op, "dilation", dilation, p.dilation);
  for (int i = 0; i < 3; ++i) {
    ETM_REQUIRE(p.window[i] > 0 && p.stride[i] > 0 && p.dilation[i] > 0, op,
                ": kernel_size, stride and dilation must be greater than zero");
    ETM_REQUIRE(p.padding[i] <= p.window[i] / 2, op, ": pad should be at most half of effective kernel size, but got pad=",
                p.padding[i], ", kernel_size=", p.window[i]);
  }
  const int64_t first_spatial = self.dim() - 3;
  for (int64_t d = first_spatial; d < self.dim(); ++d) {
    ETM_REQUIRE(self.sizes[d] > 0, op, ": Expected input's non-batch dimensions to have positive length, got ",
                shape_text(self.sizes));
  }
  std::vector<int64_t> out_sizes = self.sizes;
  for (int i = 0; i < 3; ++i) {
    const int64_t size = self.sizes[first_spatial + i];
    const int64_t out = pooling_output_size(size, p.window[i], p.padding[i], p.stride[i], p.dilation[i], ceil_mode);
    ETM_REQUIRE(out >= 1, op, ": Given input size ", shape_text(self.sizes), ". Calculated output size ",
                shape_text({pooling_output_size(self.sizes[first_spatial], p.window[0], p.padding[0], p.stride[0],
                                                p.dilation[0], ceil_mode),
                            pooling_output_size(self.sizes[first_spatial + 1], p.window[1], p.padding[1], p.stride[1],
                                                p.dilation[1], ceil_mode),
                            pooling_output_size(self.sizes[first_spatial + 2], p.window[2], p.padding[2], p.stride[2],
                                                p.dilation[2], ceil_mode)}),
                ". Output size is too small");
    out_sizes[first_spatial + i] = out;
    p.in_size[i] = checked_u32(op, size, "input size");
    p.out_size[i] = checked_u32(op, out, "output size");
  }
  plane_strides(self, 3, p.input_strides);
  p.channels = checked_u32(op, self.sizes[first_spatial - 1], "channel count");
  int64_t planes = 1;
  for (int64_t d = 0; d < first_spatial; ++d) planes *= self.sizes[d];
  checked_u32(op, planes * p.out_size[0], "number of output planes times depth");
  int64_t elements = planes;
  for (int i = 0; i < 3; ++i) elements *= p.out_size[i];
  checked_u32(op, elements, "number of output elements");
  return out_sizes;
}

device::Size3 pool3d_grid(const Pool3dParams& p, int64_t numel) {
  return {p.out_size[2], p.out_size[1], static_cast<uint64_t>(numel / (int64_t{p.out_size[1]} * p.out_size[2]))};
}

// The MSL type max_unpool copies self's elements as (by size): floating and integer dtypes.
const char* unpool_type_name(const char* op, int32_t dtype) {
  const char* element = msl_element_type_name(dtype);
  ETM_REQUIRE(element && dtype != static_cast<int32_t>(DType::bool_), op, ": dtype ", dtype_name(dtype),
              " is not supported (float32, float16, bfloat16, int64, int32, int16, int8, uint8)");
  switch (element_size(dtype)) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    default: return "ulong";
  }
}

}  // namespace

PoolOutputs max_pool3d_with_indices(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                    const std::vector<int64_t>& dilation, bool ceil_mode) {
  constexpr const char* op = "max_pool3d";
  const char* type = msl_element_type_name(self.dtype);
  ETM_REQUIRE(type && self.dtype != static_cast<int32_t>(DType::bool_), op, ": dtype ", dtype_name(self.dtype),
              " is not supported (float32, float16, bfloat16, int64, int32, int16, int8, uint8)");
  Pool3dParams p{};
  const std::vector<int64_t> out_sizes = plan_pool3d(op, self, kernel_size, stride, padding, dilation, ceil_mode, p);
  Runtime& runtime = Runtime::get();
  PoolOutputs result;
  result.values = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  result.indices = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), static_cast<int32_t>(DType::int64));
  if (result.values->numel() == 0) return result;
  KernelLaunch launch(shader_kernel("pooling3d.metal", std::string("max_pool3d_") + type));
  launch.tensor(0, self).tensor(1, *result.values).tensor(2, *result.indices).value(3, p);
  const device::Size3 grid = pool3d_grid(p, result.values->numel());
  launch.threads(grid, default_group(grid, launch));
  return result;
}

std::unique_ptr<Tensor> avg_pool3d(const Tensor& self, const std::vector<int64_t>& kernel_size,
                                   const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                   bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  constexpr const char* op = "avg_pool3d";
  const char* type = msl_float_type_name(self.dtype);
  ETM_REQUIRE(type, op, ": dtype ", dtype_name(self.dtype), " is not supported (float32, float16, bfloat16)");
  ETM_REQUIRE(!divisor_override || *divisor_override != 0, op, ": divisor must be not zero");
  ETM_REQUIRE(!divisor_override || (*divisor_override >= INT32_MIN && *divisor_override <= INT32_MAX), op,
              ": divisor ", *divisor_override, " is out of range");
  Pool3dParams p{};
  const std::vector<int64_t> out_sizes = plan_pool3d(op, self, kernel_size, stride, padding, {1}, ceil_mode, p);
  p.divisor = divisor_override ? static_cast<int32_t>(*divisor_override) : 0;
  p.count_include_pad = count_include_pad ? 1 : 0;
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  if (out->numel() == 0) return out;
  KernelLaunch launch(shader_kernel("pooling3d.metal", std::string("avg_pool3d_") + type));
  launch.tensor(0, self).tensor(1, *out).value(2, p);
  const device::Size3 grid = pool3d_grid(p, out->numel());
  launch.threads(grid, default_group(grid, launch));
  return out;
}

std::unique_ptr<Tensor> max_unpool(const Tensor& self, const Tensor& indices, int spatial_dims,
                                   const std::vector<int64_t>& output_size, const std::vector<int64_t>& stride,
                                   const std::vector<int64_t>& padding) {
  const char* op = spatial_dims == 2 ? "max_unpool2d" : "max_unpool3d";
  require_mps(op, "self", self);
  require_mps(op, "indices", indices);
  const char* type = unpool_type_name(op, self.dtype);
  ETM_REQUIRE(indices.dtype == static_cast<int32_t>(DType::int64), op,
              ": elements in indices should be type int64 but got: ", dtype_name(indices.dtype));
  ETM_REQUIRE(static_cast<int>(output_size.size()) == spatial_dims, op, ": There should be exactly ", spatial_dims,
              " elements in output_size, but got ", output_size.size(), " elements");
  ETM_REQUIRE(self.dim() == spatial_dims + 1 || self.dim() == spatial_dims + 2, op, ": Expected ", spatial_dims + 1,
              "d or ", spatial_dims + 2, "d tensor, but got ", self.dim(), " dimensions");
  ETM_REQUIRE(self.sizes == indices.sizes, op, ": Expected shape of indices to be same as that of the input tensor (",
              shape_text(self.sizes), ") but got indices tensor with shape: ", shape_text(indices.sizes));
  for (int64_t d = self.dim() - spatial_dims - 1; d < self.dim(); ++d) {
    ETM_REQUIRE(self.sizes[d] > 0, op, ": Expected input to have non-zero size for non-batch dimensions, but got ",
                shape_text(self.sizes));
  }
  if (spatial_dims == 3) {
    ETM_REQUIRE(stride.size() == 3, op, ": There should be exactly three elements (depth, height, width) in stride, "
                "but got: ", stride.size(), " elements");
    ETM_REQUIRE(padding.size() == 3, op, ": There should be exactly three elements (depth, height, width) in padding, "
                "but got: ", padding.size(), " elements");
    for (int64_t s : stride) {
      ETM_REQUIRE(s > 0, op, ": strides should be greater than zero, but got stride: ", shape_text(stride));
    }
  }
  int64_t out_plane = 1;
  for (int64_t s : output_size) {
    ETM_REQUIRE(s >= 0, op, ": output_size ", shape_text(output_size), " has a negative size");
    out_plane *= s;
  }
  std::vector<int64_t> out_sizes(self.sizes.begin(), self.sizes.end() - spatial_dims);
  out_sizes.insert(out_sizes.end(), output_size.begin(), output_size.end());
  Runtime& runtime = Runtime::get();
  Stream& stream = runtime.current_stream();
  auto out = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  if (out->numel() > 0) stream.fill_buffer(out->storage->buffer, out->buffer_offset(), out->numel() * out->itemsize(), 0);
  if (self.numel() == 0) return out;
  UnpoolParams p{};
  plane_strides(self, spatial_dims, p.input_strides);
  plane_strides(indices, spatial_dims, p.indices_strides);
  const int64_t dims = self.dim();
  p.channels = checked_u32(op, self.sizes[dims - spatial_dims - 1], "channel count");
  p.in_size[0] = spatial_dims == 3 ? checked_u32(op, self.sizes[dims - 3], "input depth") : 1;
  p.in_size[1] = checked_u32(op, self.sizes[dims - 2], "input height");
  p.in_size[2] = checked_u32(op, self.sizes[dims - 1], "input width");
  p.out_plane = checked_u32(op, out_plane, "output plane size");
  const int64_t depth_planes = self.numel() / (int64_t{p.in_size[1]} * p.in_size[2]);
  checked_u32(op, depth_planes, "number of input planes times depth");
  std::shared_ptr<Tensor> fault = new_fault_record();
  KernelLaunch launch(shader_kernel("pooling3d.metal", std::string("max_unpool_") + type));
  launch.tensor(0, self).tensor(1, indices).tensor(2, *out).tensor(3, *fault).value(4, p);
  const std::string plane_text = spatial_dims == 2 ? concat(output_size[0], "x", output_size[1])
                                                   : concat(output_size[0], "x", output_size[1], "x", output_size[2]);
  launch.completion_check([fault, op, plane_text]() -> std::string {
    const Fault seen = read_fault_record(*fault);
    if (seen.number < 0) return {};
    return concat(op, ": Found an invalid max index: ", seen.value, " (output volumes are of size ", plane_text, ")");
  });
  const device::Size3 grid{p.in_size[2], p.in_size[1], static_cast<uint64_t>(depth_planes)};
  launch.threads(grid, default_group(grid, launch));
  return out;
}

}  // namespace etm::ops
