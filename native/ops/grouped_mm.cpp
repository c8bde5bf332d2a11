#include "ops/grouped_mm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/grouped_mm.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

enum Mode : uint32_t { kGroupRows = 0, kGroupCols = 1, kGroupDepth = 2, kBatch = 3 };

// [group, row, depth] (a) or [group, depth, column] (b) strides; group 0 for a 2-D operand.
void operand_strides(const Tensor& t, int64_t* strides) {
  const bool batched = t.dim() == 3;
  strides[0] = batched ? t.strides[0] : 0;
  strides[1] = t.strides[batched ? 1 : 0];
  strides[2] = t.strides[batched ? 2 : 1];
}

}  // namespace

std::unique_ptr<Tensor> grouped_mm(const Tensor& a, const Tensor& b, const Tensor* offs,
                                   std::optional<int32_t> out_dtype) {
  constexpr const char* op = "_grouped_mm";
  require_mps(op, "mat_a", a);
  require_mps(op, "mat_b", b);
  const char* suffix = msl_float_type_name(a.dtype);
  ETM_REQUIRE(suffix, op, ": Expected mat_a to be Float32, BFloat16 or Float16 matrix, got ", dtype_name(a.dtype));
  ETM_REQUIRE(b.dtype == a.dtype, op, ": expected mat_a and mat_b to have the same dtype, but got: ",
              dtype_name(a.dtype), " != ", dtype_name(b.dtype));
  ETM_REQUIRE(!out_dtype || *out_dtype == a.dtype, op, ": Grouped gemm output dtype must match `mat_a` dtype");
  ETM_REQUIRE((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3), op,
              ": Multiplicands must be 2D or 3D but got mat_a.dim()=", a.dim(), " and mat_b.dim()=", b.dim());
  const bool a_2d = a.dim() == 2, b_2d = b.dim() == 2;
  ETM_REQUIRE((offs != nullptr) == (a_2d || b_2d), op,
              ": Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d");
  if (offs) {
    require_mps(op, "offs", *offs);
    ETM_REQUIRE(offs->dtype == static_cast<int32_t>(DType::int32), op, ": Offsets have to be int32, got ",
                dtype_name(offs->dtype));
    ETM_REQUIRE(offs->dim() == 1, op, ": Offsets tensor must be 1D, but got offs.dim()=", offs->dim());
  }
  const int64_t depth = a.sizes[a.dim() - 1];
  ETM_REQUIRE(depth == b.sizes[b.dim() - 2], op, ": contraction dimension of mat_a and mat_b must match (",
              shape_text(a.sizes), " and ", shape_text(b.sizes), ")");

  GroupedMmParams p{};
  std::vector<int64_t> out_sizes;
  const int64_t groups = offs ? offs->sizes[0] : a.sizes[0];
  if (a_2d && b_2d) {
    p.mode = kGroupDepth;
    out_sizes = {groups, a.sizes[0], b.sizes[1]};
  } else if (a_2d) {
    ETM_REQUIRE(groups == b.sizes[0], op, ": matrix batch sizes have to match (", groups, " offsets, ", b.sizes[0],
                " matrices)");
    p.mode = kGroupRows;
    out_sizes = {a.sizes[0], b.sizes[2]};
  } else if (b_2d) {
    ETM_REQUIRE(groups == a.sizes[0], op, ": matrix batch sizes have to match (", groups, " offsets, ", a.sizes[0],
                " matrices)");
    p.mode = kGroupCols;
    out_sizes = {a.sizes[1], b.sizes[1]};
  } else {
    ETM_REQUIRE(a.sizes[0] == b.sizes[0], op, ": batched dimension has to match (", a.sizes[0], " and ", b.sizes[0],
                ")");
    p.mode = kBatch;
    out_sizes = {a.sizes[0], a.sizes[1], b.sizes[2]};
  }
  Runtime& runtime = Runtime::get();
  auto out = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), a.dtype);
  operand_strides(a, p.a_strides);
  operand_strides(b, p.b_strides);
  const bool out_3d = out_sizes.size() == 3;
  p.out_strides[0] = out_3d ? out->strides[0] : 0;
  p.out_strides[1] = out->strides[out_3d ? 1 : 0];
  p.out_strides[2] = out->strides[out_3d ? 2 : 1];
  p.rows = checked_u32(op, out_sizes[out_3d ? 1 : 0], "row count");
  p.cols = checked_u32(op, out_sizes[out_3d ? 2 : 1], "column count");
  p.depth = checked_u32(op, depth, "depth");
  p.groups = checked_u32(op, groups, "group count");
  if (out->numel() == 0) return out;
  // Blocks twice as wide along the wider output dimension (where it holds a wide block) read each
  // element of the other operand half as often. Not along a grouped dimension: a group's blocks
  // start at its first row (column), so wide ones there would leave more of them partial.
  uint32_t block_rows = kGroupedMmBlock, block_cols = kGroupedMmBlock;
  if (p.cols >= p.rows && p.cols >= kGroupedMmWideBlock && p.mode != kGroupCols) {
    block_cols = kGroupedMmWideBlock;
  } else if (p.rows > p.cols && p.rows >= kGroupedMmWideBlock && p.mode != kGroupRows) {
    block_rows = kGroupedMmWideBlock;
  }
  auto block_kernel = [&](uint32_t rows, uint32_t cols) -> KernelFunction& {
    return shader_kernel("grouped_mm.metal", "grouped_mm_" + std::to_string(rows) + "x" + std::to_string(cols) +
                                                 "_" + suffix);
  };
  // A simdgroup of 32 threads per 32 x 32 outputs; the narrow block where the device allows too
  // few threads per group for a wide one.
  uint32_t threads = block_rows * block_cols / 32;
  if (block_kernel(block_rows, block_cols).max_threads_per_group() < threads) {
    block_rows = block_cols = kGroupedMmBlock;
    threads = block_rows * block_cols / 32;
  }
  KernelLaunch launch(block_kernel(block_rows, block_cols));
  // Operand tiles (block_rows x depth, depth x block_cols), then the block's results.
  const size_t tile_floats = std::max<size_t>((block_rows + block_cols) * kGroupedMmTileDepth,
                                              block_rows * block_cols);
  // A zero depth leaves a or b without storage; the kernel reads neither then.
  const Tensor& any = *out;
  launch.tensor(0, a.numel() ? a : any).tensor(1, b.numel() ? b : any)
      .tensor(2, offs && offs->numel() ? *offs : any).tensor(3, *out).value(4, p)
      .threadgroup_memory(0, tile_floats * sizeof(float));
  // Blocks along a grouped dimension: each group's blocks start at its first row (column), so
  // the groups and the tail past the last end add at most one partial block each.
  uint64_t column_blocks = (uint64_t(p.cols) + block_cols - 1) / block_cols;
  uint64_t row_blocks = (uint64_t(p.rows) + block_rows - 1) / block_rows;
  if (p.mode == kGroupRows) row_blocks += p.groups;
  if (p.mode == kGroupCols) column_blocks += p.groups;
  checked_u32(op, std::max(row_blocks, column_blocks), "block count");
  launch.threadgroups({column_blocks, row_blocks, out_3d ? static_cast<uint64_t>(out_sizes[0]) : 1},
                      {threads, 1, 1});
  return out;
}

}  // namespace etm::ops
