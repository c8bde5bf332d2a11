#include "ops/scan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/scan.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kOp = "cumsum";
constexpr const char* kShaderFile = "scan.metal";
// Lines are split into chunks until the passes have about this many threads...
constexpr int64_t kTargetThreads = 16384;
// ...but no chunk is shorter than this.
constexpr int64_t kMinChunk = 256;
// With the GPU launch shape, lines of at least this many elements take the one-pass scan_line
// (a threadgroup of kLineThreads per line): every element read once instead of twice.
constexpr int64_t kLineMinimum = 1024;
constexpr uint64_t kLineThreads = 256;

}  // namespace

std::unique_ptr<Tensor> cumsum(const Tensor& self, int64_t dim, std::optional<int32_t> dtype) {
  require_mps(kOp, "self", self);
  const int32_t out_dtype = scan_output_dtype(kOp, self, dtype);
  const char* input_name = msl_element_type_name(self.dtype);
  const int64_t n = self.dim();
  dim = wrap_dim(kOp, dim, n);
  ETM_REQUIRE(n <= kScanMaxDims + 1, kOp, ": at most ", kScanMaxDims + 1, " dimensions are supported, not ", n);

  const std::vector<int64_t> out_strides = contiguous_strides(self.sizes);
  Runtime& runtime = Runtime::get();
  auto output = runtime.empty_tensor(self.sizes, out_strides, out_dtype);

  ScanParams p{};
  int64_t lines;
  p.outer_dims = pack_outer_dims(kOp, self.sizes, dim,
                                 {{self.strides, p.input_outer}, {out_strides, p.output_outer}},
                                 p.outer_sizes, lines);
  const int64_t length = n == 0 ? 1 : self.sizes[dim];
  if (n > 0) {
    p.input_stride = self.strides[dim];
    p.output_stride = out_strides[dim];
  }
  if (lines == 0 || length == 0) return output;
  p.length = checked_u32(kOp, length, "length");
  p.lines = checked_u32(kOp, lines, "number of lines");
  const std::string suffix = std::string(input_name) + "_" + msl_element_type_name(out_dtype);
  const bool float_accumulator = is_floating(out_dtype);
  if (length >= kLineMinimum && launch_shape() == LaunchShape::gpu &&
      shader_kernel(kShaderFile, "scan_line_" + suffix).max_threads_per_group() >= kLineThreads) {
    KernelLaunch launch(shader_kernel(kShaderFile, "scan_line_" + suffix));
    launch.tensor(0, self).tensor(1, *output).value(2, p).threadgroups({uint64_t(lines), 1, 1}, {kLineThreads, 1, 1});
    return output;
  }
  const int64_t max_chunks = std::max<int64_t>(1, length / kMinChunk);
  int64_t chunks = std::clamp<int64_t>((kTargetThreads + lines - 1) / lines, 1, max_chunks);
  const int64_t chunk_length = (length + chunks - 1) / chunks;
  chunks = (length + chunk_length - 1) / chunk_length;
  p.chunks = static_cast<uint32_t>(chunks);
  p.chunk_length = static_cast<uint32_t>(chunk_length);

  const device::Size3 chunk_grid{static_cast<uint64_t>(chunks), static_cast<uint64_t>(lines), 1};
  // Chunk totals, then their exclusive prefix sums (the offsets scan_apply starts from).
  std::unique_ptr<Tensor> offsets;
  if (chunks > 1) {
    offsets = runtime.empty_tensor({lines * chunks}, {1},
                                   static_cast<int32_t>(float_accumulator ? DType::float32 : DType::uint64));
    {
      KernelLaunch launch(shader_kernel(kShaderFile, "scan_chunk_totals_" + suffix));
      launch.tensor(0, self).tensor(1, *offsets).value(2, p)
          .threads(chunk_grid, default_group(chunk_grid, launch));
    }
    {
      KernelLaunch launch(shader_kernel(
          kShaderFile, float_accumulator ? "scan_chunk_offsets_float" : "scan_chunk_offsets_ulong"));
      const device::Size3 grid{static_cast<uint64_t>(lines), 1, 1};
      launch.tensor(0, *offsets).value(1, p)
          .threads(grid, default_group(grid, launch));
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
        .threads(chunk_grid, default_group(chunk_grid, launch));
  }
  return output;
}

}  // namespace etm::ops
