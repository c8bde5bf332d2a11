#include "ops/op_support.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "device/settings.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {

const char* msl_float_type_name(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::float32: return "float";
    case DType::float16: return "half";
    case DType::bfloat16: return "bfloat";
    default: return nullptr;
  }
}

const char* msl_element_type_name(int32_t dtype) {
  if (const char* name = msl_float_type_name(dtype)) return name;
  switch (static_cast<DType>(dtype)) {
    case DType::int64: return "long";
    case DType::int32: return "int";
    case DType::int16: return "short";
    case DType::int8: return "char";
    case DType::uint8: return "uchar";
    case DType::bool_: return "bool";
    default: return nullptr;
  }
}

std::string shape_text(const std::vector<int64_t>& sizes) {
  std::ostringstream text;
  text << '[';
  for (size_t i = 0; i < sizes.size(); ++i) text << (i ? ", " : "") << sizes[i];
  text << ']';
  return text.str();
}

Tensor strided_view(const Tensor& base, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
  Tensor view = base;
  view.sizes = std::move(sizes);
  view.strides = std::move(strides);
  view.storage_offset += offset;
  return view;
}

uint32_t checked_u32(const char* op, int64_t value, const char* what) {
  ETM_REQUIRE(value >= 0 && value <= int64_t{UINT32_MAX}, op, ": ", what, " ", value,
              " exceeds the kernels' 32-bit range");
  return static_cast<uint32_t>(value);
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t n) {
  const int64_t wrap = std::max<int64_t>(n, 1);
  ETM_REQUIRE(dim >= -wrap && dim < wrap, op, ": dim ", dim, " is out of range for a ", n,
              "-dimensional tensor");
  return dim < 0 ? dim + wrap : dim;
}

uint32_t pack_outer_dims(const char* op, const std::vector<int64_t>& sizes, int64_t dim,
                         std::initializer_list<OuterStrides> strides, uint32_t* outer_sizes,
                         int64_t& lines) {
  uint32_t count = 0;
  lines = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d == dim) continue;
    for (const OuterStrides& s : strides) s.into[count] = s.strides[d];
    outer_sizes[count] = checked_u32(op, sizes[d], "size");
    ++count;
    lines *= sizes[d];
  }
  return count;
}

int64_t lay_out_lines(const char* op, const Tensor& self, int64_t& dim, const std::vector<int64_t>& out_strides,
                      LineLayout& layout) {
  const int64_t n = self.dim();
  dim = wrap_dim(op, dim, n);
  ETM_REQUIRE(n <= kMaxOuterDims + 1, op, ": at most ", kMaxOuterDims + 1, " dimensions are supported, not ", n);
  int64_t lines;
  layout.outer_dims = pack_outer_dims(op, self.sizes, dim,
                                      {{self.strides, layout.input_outer}, {out_strides, layout.values_outer},
                                       {out_strides, layout.indices_outer}},
                                      layout.outer_sizes, lines);
  if (n > 0) {
    layout.input_stride = self.strides[dim];
    layout.values_stride = layout.indices_stride = out_strides[dim];
  }
  const int64_t length = n == 0 ? 1 : self.sizes[dim];
  layout.length = checked_u32(op, length, "length");
  return length == 0 ? 0 : lines;
}

device::Size3 group_for(const device::Size3& grid, uint64_t limit) {
  device::Size3 group;
  group.x = std::max<uint64_t>(1, std::min(grid.x, limit));
  group.y = std::max<uint64_t>(1, std::min(grid.y, limit / group.x));
  return group;
}

device::Size3 default_group(const device::Size3& grid, const KernelLaunch& launch) {
  return group_for(grid, std::min<uint32_t>(256, launch.max_threads_per_group()));
}

LaunchShape launch_shape() {
  std::string forced;
  const device::Status status = settings::read_choice("ETMETAL_OP_SHAPES", &forced);
  ETM_REQUIRE(status.ok(), status.message());
  if (forced == "gpu") return LaunchShape::gpu;
  if (forced == "cpu") return LaunchShape::cpu;
  return std::strcmp(Runtime::get().device().kind(), "cpu") == 0 ? LaunchShape::cpu : LaunchShape::gpu;
}

bool sorted_form_wins(uint64_t walk, uint64_t walkers) {
  constexpr uint64_t kShortWalk = 64, kLongWalk = 1024, kWalkersFillingAGpu = 16384;
  if (launch_shape() == LaunchShape::cpu || walk < kShortWalk) return false;
  return walk >= kLongWalk || walkers < kWalkersFillingAGpu;
}

void require_mps(const char* op, const char* name, const Tensor& t) {
  ETM_REQUIRE(t.device_type == kDeviceMps, op, ": ", name, " must be an mps tensor (device type ",
              t.device_type, ")");
}

bool is_floating(int32_t dtype) { return msl_float_type_name(dtype) != nullptr; }

int32_t scan_output_dtype(const char* op, const Tensor& self, std::optional<int32_t> dtype) {
  ETM_REQUIRE(msl_element_type_name(self.dtype), op, ": input dtype ", dtype_name(self.dtype),
              " is not supported");
  const int32_t out_dtype =
      dtype ? *dtype : (is_floating(self.dtype) ? self.dtype : static_cast<int32_t>(DType::int64));
  const bool allowed = is_floating(self.dtype)
                           ? is_floating(out_dtype)
                           : (out_dtype == static_cast<int32_t>(DType::int64) ||
                              out_dtype == static_cast<int32_t>(DType::int32) ||
                              out_dtype == static_cast<int32_t>(DType::float32));
  ETM_REQUIRE(allowed, op, ": ", dtype_name(self.dtype), " input to ", dtype_name(out_dtype),
              " output is not supported (floating inputs: float32/float16/bfloat16 outputs; "
              "integer and bool inputs: int64/int32/float32 outputs)");
  return out_dtype;
}

void require_float_operand(const char* op, const char* name, const Tensor& t) {
  ETM_REQUIRE(t.device_type == kDeviceMps, op, ": ", name, " must be on device mps, not device type ",
              t.device_type);
  ETM_REQUIRE(msl_float_type_name(t.dtype), op, ": ", name, " has dtype ", dtype_name(t.dtype),
              "; supported are float32, float16 and bfloat16");
}

const char* activation_type_name(const char* op, const char* what, const Tensor& t) {
  if (const char* name = msl_float_type_name(t.dtype)) return name;
  fail(op, ": ", what, " must be float32, float16 or bfloat16, got ", dtype_name(t.dtype));
}

void require_device_tensor(const char* op, const char* what, const Tensor& t, int64_t dim) {
  require_mps(op, what, t);
  ETM_REQUIRE(t.dim() == dim, op, ": ", what, " must have ", dim, " dimensions, got ", t.dim());
}

bool is_supported_group_size(int64_t group_size) {
  return group_size == 32 || group_size == 64 || group_size == 128 || group_size == 256;
}

std::shared_ptr<Tensor> new_fault_record() {
  Runtime& runtime = Runtime::get();
  std::shared_ptr<Tensor> record = runtime.empty_tensor({3}, {1}, static_cast<int32_t>(DType::int32));
  runtime.current_stream().fill_buffer(record->storage->buffer, record->buffer_offset(), 3 * sizeof(int32_t), 0);
  return record;
}

Fault read_fault_record(const Tensor& record) {
  int32_t words[3];
  std::memcpy(words, record.data(), sizeof words);
  const uint64_t bits = (uint64_t{static_cast<uint32_t>(words[2])} << 32) | static_cast<uint32_t>(words[1]);
  return {words[0] - 1, static_cast<int64_t>(bits)};
}

std::vector<int64_t> pointwise_output_strides(const std::vector<int64_t>& shape,
                                              std::initializer_list<const int64_t*> operand_strides) {
  const size_t ndim = shape.size();
  // 1 when dimension a should sit inside (change faster than) dimension b, -1 when it should
  // not, 0 when no operand decides (TensorIterator's should_swap, dims fastest first).
  auto should_swap = [&](size_t a, size_t b) {
    for (const int64_t* strides : operand_strides) {
      const int64_t stride_a = strides[a], stride_b = strides[b];
      if (stride_a == 0 || stride_b == 0) continue;
      if (stride_a < stride_b) return -1;
      if (stride_a > stride_b) return 1;
      if (shape[a] > shape[b]) return 1;
    }
    return 0;
  };
  std::vector<size_t> order(ndim);  // fastest first; starts as the last dimension first
  for (size_t i = 0; i < ndim; ++i) order[i] = ndim - 1 - i;
  for (size_t i = 1; i < ndim; ++i) {
    size_t moving = i;
    for (size_t j = i; j-- > 0;) {
      const int decision = should_swap(order[j], order[moving]);
      if (decision > 0) {
        std::swap(order[j], order[moving]);
        moving = j;
      } else if (decision < 0) {
        break;
      }
    }
  }
  std::vector<int64_t> strides(ndim);
  int64_t next = 1;
  for (size_t dim : order) {
    strides[dim] = next;
    next *= shape[dim];
  }
  return strides;
}

std::vector<size_t> dims_by_decreasing_stride(const std::vector<int64_t>& strides) {
  std::vector<size_t> dims(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  return dims;
}

}  // namespace etm::ops
