#include "ops/scan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/shader_kernels.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "cumsum";
constexpr const char* kShaderFile = "scan.metal";
constexpr int kMaxDims = 8;
// Lines are split into chunks until the passes have about this many threads...
constexpr int64_t kTargetThreads = 16384;
// ...but no chunk is shorter than this.
constexpr int64_t kMinChunk = 256;

// Must match ScanParams in shaders/scan.metal.
struct ScanParams {
  int64_t input_outer[kMaxDims];
  int64_t output_outer[kMaxDims];
  int64_t input_stride;
  int64_t output_stride;
  uint32_t outer_sizes[kMaxDims];
  uint32_t outer_dims;
  uint32_t length;
  uint32_t lines;
  uint32_t chunks;
  uint32_t chunk_length;
};
static_assert(sizeof(ScanParams) == 200, "ScanParams must match the MSL layout");

bool is_floating(int32_t dtype) {
  return dtype == static_cast<int32_t>(DType::float32) || dtype == static_cast<int32_t>(DType::float16) ||
         dtype == static_cast<int32_t>(DType::bfloat16);
}

const char* type_name(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::float32: return "float";
    case DType::float16: return "half";
    case DType::bfloat16: return "bfloat";
    case DType::int64: return "long";
    case DType::int32: return "int";
    case DType::int16: return "short";
    case DType::int8: return "char";
    case DType::uint8: return "uchar";
    case DType::bool_: return "bool";
    default: return nullptr;
  }
}

uint32_t to_u32(int64_t value, const char* what) {
  ETM_REQUIRE(value >= 0 && value <= int64_t{UINT32_MAX}, kOp, ": ", what, " ", value,
              " exceeds the kernels' 32-bit range");
  return static_cast<uint32_t>(value);
}

device::Size3 group_for(const device::Size3& grid, uint64_t limit) {
  device::Size3 group;
  group.x = std::max<uint64_t>(1, std::min(grid.x, limit));
  group.y = std::max<uint64_t>(1, std::min(grid.y, limit / group.x));
  return group;
}

}  // namespace

std::unique_ptr<Tensor> cumsum(const Tensor& self, int64_t dim, std::optional<int32_t> dtype) {
  ETM_REQUIRE(self.device_type == kDeviceMps, kOp, ": self must be an mps tensor (device type ",
              self.device_type, ")");
  const char* input_name = type_name(self.dtype);
  ETM_REQUIRE(input_name, kOp, ": input dtype ", dtype_name(self.dtype), " is not supported");
  const int32_t out_dtype =
      dtype ? *dtype : (is_floating(self.dtype) ? self.dtype : static_cast<int32_t>(DType::int64));
  const bool allowed = is_floating(self.dtype)
                           ? is_floating(out_dtype)
                           : (out_dtype == static_cast<int32_t>(DType::int64) ||
                              out_dtype == static_cast<int32_t>(DType::int32) ||
                              out_dtype == static_cast<int32_t>(DType::float32));
  ETM_REQUIRE(allowed, kOp, ": ", dtype_name(self.dtype), " input to ", dtype_name(out_dtype),
              " output is not supported (floating inputs: float32/float16/bfloat16 outputs; "
              "integer and bool inputs: int64/int32/float32 outputs)");
  const int64_t n = self.dim();
  const int64_t wrap = std::max<int64_t>(n, 1);
  ETM_REQUIRE(dim >= -wrap && dim < wrap, kOp, ": dim ", dim, " is out of range for a ", n,
              "-dimensional tensor");
  if (dim < 0) dim += wrap;
  ETM_REQUIRE(n <= kMaxDims + 1, kOp, ": at most ", kMaxDims + 1, " dimensions are supported, not ", n);

  const std::vector<int64_t> out_strides = contiguous_strides(self.sizes);
  Runtime& runtime = Runtime::get();
  auto output = runtime.empty_tensor(self.sizes, out_strides, out_dtype);

  ScanParams p{};
  int64_t lines = 1;
  for (int64_t d = 0; d < n; ++d) {
    if (d == dim) continue;
    p.input_outer[p.outer_dims] = self.strides[d];
    p.output_outer[p.outer_dims] = out_strides[d];
    p.outer_sizes[p.outer_dims] = to_u32(self.sizes[d], "size");
    ++p.outer_dims;
    lines *= self.sizes[d];
  }
  const int64_t length = n == 0 ? 1 : self.sizes[dim];
  if (n > 0) {
    p.input_stride = self.strides[dim];
    p.output_stride = out_strides[dim];
  }
  if (lines == 0 || length == 0) return output;
  p.length = to_u32(length, "length");
  p.lines = to_u32(lines, "number of lines");
  const int64_t max_chunks = std::max<int64_t>(1, length / kMinChunk);
  int64_t chunks = std::clamp<int64_t>((kTargetThreads + lines - 1) / lines, 1, max_chunks);
  const int64_t chunk_length = (length + chunks - 1) / chunks;
  chunks = (length + chunk_length - 1) / chunk_length;
  p.chunks = static_cast<uint32_t>(chunks);
  p.chunk_length = static_cast<uint32_t>(chunk_length);

  const std::string suffix = std::string(input_name) + "_" + type_name(out_dtype);
  const bool float_accumulator = is_floating(out_dtype);
  const device::Size3 chunk_grid{static_cast<uint64_t>(chunks), static_cast<uint64_t>(lines), 1};
  // Chunk totals, then their exclusive prefix sums (the offsets scan_apply starts from).
  std::unique_ptr<Tensor> offsets;
  if (chunks > 1) {
    offsets = runtime.empty_tensor({lines * chunks}, {1},
                                   static_cast<int32_t>(float_accumulator ? DType::float32 : DType::uint64));
    {
      KernelLaunch launch(shader_kernel(kShaderFile, "scan_chunk_totals_" + suffix));
      launch.tensor(0, self).tensor(1, *offsets).value(2, p)
          .threads(chunk_grid, group_for(chunk_grid, std::min<uint32_t>(256, launch.max_threads_per_group())));
    }
    {
      KernelLaunch launch(shader_kernel(
          kShaderFile, float_accumulator ? "scan_chunk_offsets_float" : "scan_chunk_offsets_ulong"));
      const device::Size3 grid{static_cast<uint64_t>(lines), 1, 1};
      launch.tensor(0, *offsets).value(1, p)
          .threads(grid, group_for(grid, std::min<uint32_t>(256, launch.max_threads_per_group())));
    }
  }
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "scan_apply_" + suffix));
    // Without chunk offsets the kernel never reads that slot: bind the input there.
    launch.tensor(0, self);
    if (offsets) {
      launch.tensor(1, *offsets);
    } else {
      launch.tensor(1, self);
    }
    launch.tensor(2, *output).value(3, p)
        .threads(chunk_grid, group_for(chunk_grid, std::min<uint32_t>(256, launch.max_threads_per_group())));
  }
  return output;
}

}  // namespace etm::ops
