#include "ops/matmul.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "ops/graph_fallbacks.h"
#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/matmul.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// The tiled kernels' geometry (shaders/matmul.metal: four simdgroups, 32-deep K steps).
constexpr uint64_t kTiledThreads = 128;
constexpr uint64_t kTileDepth = 32;
constexpr uint64_t kRowDotSimdgroups = 4;
// Must match the constants of matmul_vector_* in shaders/matmul.metal.
constexpr uint64_t kVectorSimdgroups = 8;
constexpr uint64_t kVectorOutputs = 4;  // outputs per simdgroup of matmul_vector_kdot
// Below this extent in M, N or K the tiled kernels waste most of their tile.
constexpr int64_t kTiledMinimum = 16;
// From a full 64 x 64 tile on, the 64-wide tiles: each operand is read half as often as with
// 32-wide ones (device bytes 6.5x -> 3.3x the minimum at 128 x 1024 x 1024).
constexpr int64_t kLargeTileMinimum = 64;
// matmul_tiled128x64 / 64x128 (eight simdgroups, 16-deep double-buffered K steps) from a full
// 128-wide block on: the other operand is read half as often again (3.3x -> 2.5x at 128 x 1024
// x 1024).
constexpr uint64_t kWideThreads = 256;
constexpr uint64_t kWideDepth = 16;
constexpr int64_t kWideTileMinimum = 128;
constexpr int64_t kRowDotMinimumDepth = 64;
// Columns per thread of matmul_gemv_kdot and matmul_gemv_columns (shaders/matmul.metal).
constexpr uint64_t kGemvDotColumns = 4;
constexpr uint64_t kGemvStripColumns = 32;
constexpr uint64_t kGemvGroupThreads = 64;
// matmul_few_rows (the GPU launch shape of those products): output columns per threadgroup of
// kFewRowsThreads; the wide form, for more than kFewRowsNarrowMax rows, re-reads a half as often.
constexpr uint64_t kFewRowsColumns = 64;
constexpr uint64_t kFewRowsWideColumns = 128;
constexpr uint64_t kFewRowsNarrowMax = 8;
constexpr uint64_t kFewRowsThreads = 256;
// Multiply-adds a gemv thread group should do at least: enough that the per-group cost stays
// small, few enough that a product with few strips still spreads over the CPU device's workers.
constexpr uint64_t kGemvGroupWork = 32768;
// matmul_panels (the CPU launch shape of the tiled products, shaders/matmul.metal): threads of
// 8-row strips, 32-column panels staged kPanelDepth deep.
constexpr int64_t kPanelRows = 8;
constexpr int64_t kPanelColumns = 32;
constexpr uint64_t kPanelDepth = 64;
constexpr uint64_t kPanelThreads = 16;

void require_operand(const char* op, const char* name, const Tensor& t, int64_t dim) {
  require_float_operand(op, name, t);
  ETM_REQUIRE(t.dim() == dim, op, ": ", name, " must be ", dim, "-D, got shape ", shape_text(t.sizes));
}

// True when the byte ranges the two tensors' elements can reach intersect in one buffer.
bool shares_memory(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.storage || !b.storage) return false;
  if (!a.storage->buffer || a.storage->buffer != b.storage->buffer) return false;
  const size_t a_first = a.buffer_offset();
  const size_t b_first = b.buffer_offset();
  return a_first < b_first + b.reach_bytes() && b_first < a_first + a.reach_bytes();
}

bool has_internal_overlap(const Tensor& t) {
  for (size_t d = 0; d < t.sizes.size(); ++d)
    if (t.sizes[d] > 1 && t.strides[d] == 0) return true;
  return false;
}

// sizes and strides as [batch, rows, columns]; a matrix is a batch of one.
struct Batched {
  int64_t sizes[3];
  int64_t strides[3];
};

Batched batched(const Tensor& t) {
  if (t.dim() == 2) return {{1, t.sizes[0], t.sizes[1]}, {0, t.strides[0], t.strides[1]}};
  return {{t.sizes[0], t.sizes[1], t.sizes[2]}, {t.strides[0], t.strides[1], t.strides[2]}};
}

// Strides that read `addend` broadcast to `shape` (aligned at the trailing dimension, as
// torch broadcasts); throws unless it broadcasts.
void broadcast_strides(const char* op, const Tensor& addend, const Tensor& out, int64_t* strides) {
  const int64_t out_dim = out.dim();
  ETM_REQUIRE(addend.dim() <= out_dim, op, ": self of shape ", shape_text(addend.sizes),
              " does not broadcast to the output shape ", shape_text(out.sizes));
  const int64_t lead = out_dim - addend.dim();
  const int64_t first_batched = 3 - out_dim;  // 2-D outputs have no batch dimension
  strides[0] = 0;
  for (int64_t d = 0; d < out_dim; ++d) {
    int64_t stride = 0;
    if (d >= lead) {
      const int64_t size = addend.sizes[d - lead];
      ETM_REQUIRE(size == out.sizes[d] || size == 1, op, ": self of shape ", shape_text(addend.sizes),
                  " does not broadcast to the output shape ", shape_text(out.sizes));
      stride = size == 1 ? 0 : addend.strides[d - lead];
    }
    strides[first_batched + d] = stride;
  }
}

void require_grid_extent(const char* op, int64_t extent) {
  ETM_REQUIRE(extent <= int64_t(UINT32_MAX), op, ": dimension of ", extent,
              " elements exceeds the dispatch limit of 2^32 - 1");
}

// A tiled kernel specialised for the problem: its function constants say whether M and N fill
// whole blocks and K whole steps (then the kernel checks no edges).
KernelFunction& tiled_kernel(const std::string& name, int64_t M, int64_t N, int64_t K, uint64_t block_m,
                             uint64_t block_n, uint64_t step) {
  return shader_kernel("matmul.metal", name,
                       bool_constants({{"aligned_blocks", uint64_t(M) % block_m == 0 && uint64_t(N) % block_n == 0},
                                       {"aligned_depth", uint64_t(K) % step == 0}}));
}

// The same product transposed: out^T = b^T @ a^T, rows and columns exchanged (a and b are then
// bound in each other's place).
MatmulParams transposed_product(const MatmulParams& p) {
  MatmulParams t = p;
  std::swap(t.rows, t.columns);
  t.a_strides[0] = p.b_strides[0], t.a_strides[1] = p.b_strides[2], t.a_strides[2] = p.b_strides[1];
  t.b_strides[0] = p.a_strides[0], t.b_strides[1] = p.a_strides[2], t.b_strides[2] = p.a_strides[1];
  std::swap(t.out_strides[1], t.out_strides[2]);
  std::swap(t.addend_strides[1], t.addend_strides[2]);
  return t;
}

// With the CPU launch shape, a product with few rows (or, transposed, few columns) runs on the
// matmul_gemv kernels when its operands have the unit strides one of them needs. Returns false
// (nothing encoded) otherwise.
bool dispatch_gemv(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& addend,
                   const MatmulParams& params, const std::string& suffix) {
  const bool transposed = params.columns < params.rows;
  const MatmulParams p = transposed ? transposed_product(params) : params;
  if (p.rows >= kTiledMinimum) return false;
  const bool kdot = p.a_strides[2] == 1 && p.b_strides[1] == 1;
  if (!kdot && !(p.b_strides[2] == 1 && uint64_t(p.columns) >= kGemvStripColumns)) return false;
  KernelLaunch launch(
      shader_kernel("matmul.metal", (kdot ? "matmul_gemv_kdot_" : "matmul_gemv_columns_") + suffix));
  launch.tensor(0, out).tensor(1, transposed ? b : a).tensor(2, transposed ? a : b).tensor(3, addend).value(4, p);
  // x: the rows, so that a thread group's consecutive threads share their strip of b.
  const uint64_t rows = uint64_t(p.rows);
  const uint64_t strip = kdot ? kGemvDotColumns : kGemvStripColumns;
  const uint64_t strips = (uint64_t(p.columns) + strip - 1) / strip;
  const uint64_t strip_work = rows * strip * uint64_t(p.depth);
  const uint64_t group_strips = std::clamp<uint64_t>((kGemvGroupWork + strip_work - 1) / strip_work, 1,
                                                     std::min(strips, kGemvGroupThreads / rows));
  launch.threads({rows, strips, uint64_t(p.batch)}, {rows, group_strips, 1});
  return true;
}

// M == 1 with b unit-stride along K or N: matmul_vector_kdot / matmul_vector_columns.
bool takes_vector_kernel(const MatmulParams& p) {
  return p.rows == 1 && p.depth >= kRowDotMinimumDepth && (p.b_strides[1] == 1 || p.b_strides[2] == 1);
}

// N == 1 with both operands unit-stride along K: matmul_rowdot.
bool takes_rowdot_kernel(const MatmulParams& p) {
  return p.columns == 1 && p.depth >= kRowDotMinimumDepth && p.a_strides[2] == 1 && p.b_strides[1] == 1;
}

// With the GPU launch shape, a product with fewer than 16 rows (or, transposed, columns) and a K
// of at least kTiledMinimum runs on matmul_few_rows, any strides, unless a row vector or column
// kernel takes it. Returns false (nothing encoded) otherwise.
bool dispatch_few_rows(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& addend,
                       const MatmulParams& params, const std::string& suffix) {
  if (params.depth < kTiledMinimum || takes_vector_kernel(params) || takes_rowdot_kernel(params)) return false;
  const bool transposed = params.columns < params.rows;
  const MatmulParams p = transposed ? transposed_product(params) : params;
  if (p.rows >= kTiledMinimum) return false;
  const bool wide = uint64_t(p.rows) > kFewRowsNarrowMax;
  KernelFunction& kernel = shader_kernel("matmul.metal", (wide ? "matmul_few_rows_wide_" : "matmul_few_rows_") + suffix);
  if (kernel.max_threads_per_group() < kFewRowsThreads) return false;
  KernelLaunch launch(kernel);
  launch.tensor(0, out).tensor(1, transposed ? b : a).tensor(2, transposed ? a : b).tensor(3, addend).value(4, p);
  const uint64_t columns = wide ? kFewRowsWideColumns : kFewRowsColumns;
  launch.threadgroups({(uint64_t(p.columns) + columns - 1) / columns, uint64_t(p.batch), 1}, {kFewRowsThreads, 1, 1});
  return true;
}

// The CPU launch shape of the tiled products: matmul_panels, when the product (transposed if it
// has fewer than 32 columns) has whole strips in both dimensions. Returns false (nothing
// encoded) otherwise.
bool dispatch_panels(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& addend,
                     const MatmulParams& params, const std::string& suffix) {
  const bool transposed = params.columns < kPanelColumns;
  const MatmulParams p = transposed ? transposed_product(params) : params;
  if (p.rows < kPanelRows || p.columns < kPanelColumns || p.depth == 0) return false;
  KernelLaunch launch(shader_kernel("matmul.metal", "matmul_panels_" + suffix));
  launch.tensor(0, out).tensor(1, transposed ? b : a).tensor(2, transposed ? a : b).tensor(3, addend).value(4, p);
  const uint64_t block_m = kPanelThreads * kPanelRows;
  launch.threadgroup_memory(0, (kPanelDepth + block_m) * kPanelColumns * sizeof(float));
  launch.threadgroups({(uint64_t(p.columns) + kPanelColumns - 1) / kPanelColumns,
                       (uint64_t(p.rows) + block_m - 1) / block_m, uint64_t(p.batch)},
                      {kPanelThreads, 1, 1});
  return true;
}

// Chooses the kernel for the problem's shape and encodes it; `bind` binds the operands.
template <typename Bind>
void dispatch_matmul(Bind&& bind, const std::string& suffix, int64_t M, int64_t N, int64_t K,
                     const MatmulParams& params, uint64_t batch) {
  const uint64_t block_m = M >= kWideTileMinimum ? 128 : 64;
  const uint64_t block_n = 128 * 64 / block_m;
  const std::string wide_name =
      "matmul_tiled" + std::to_string(block_m) + "x" + std::to_string(block_n) + "_" + suffix;
  // The wide kernels need all their threads (a GPU may allow fewer to a pipeline).
  if (K >= kTiledMinimum && std::min(M, N) >= kLargeTileMinimum && std::max(M, N) >= kWideTileMinimum &&
      tiled_kernel(wide_name, M, N, K, block_m, block_n, kWideDepth).max_threads_per_group() >= kWideThreads) {
    const size_t staged = 2 * (block_m + block_n) * kWideDepth * sizeof(float);
    const size_t results = block_m * block_n * sizeof(float);
    KernelLaunch launch(tiled_kernel(wide_name, M, N, K, block_m, block_n, kWideDepth));
    bind(launch).threadgroup_memory(0, std::max(staged, results));
    launch.threadgroups({(uint64_t(N) + block_n - 1) / block_n, (uint64_t(M) + block_m - 1) / block_m, batch},
                        {kWideThreads, 1, 1});
    return;
  }
  if (M >= kTiledMinimum && N >= kTiledMinimum && K >= kTiledMinimum) {
    const bool large = M >= kLargeTileMinimum && N >= kLargeTileMinimum;
    const uint64_t block = large ? 64 : 32;
    const size_t staged = (2 * block * kTileDepth) * sizeof(float);
    const size_t results = block * block * sizeof(float);
    KernelLaunch launch(
        tiled_kernel((large ? "matmul_tiled64_" : "matmul_tiled32_") + suffix, M, N, K, block, block, kTileDepth));
    bind(launch).threadgroup_memory(0, std::max(staged, results));
    launch.threadgroups({(uint64_t(N) + block - 1) / block, (uint64_t(M) + block - 1) / block, batch},
                        {kTiledThreads, 1, 1});
    return;
  }
  if (takes_vector_kernel(params)) {
    // Row vector times matrix: the vector staged once per threadgroup.
    const bool kdot = params.b_strides[1] == 1;
    KernelLaunch launch(
        shader_kernel("matmul.metal", (kdot ? "matmul_vector_kdot_" : "matmul_vector_columns_") + suffix));
    bind(launch);
    const uint64_t columns_per_group = kdot ? kVectorSimdgroups * kVectorOutputs : 32;
    launch.threadgroups({(uint64_t(N) + columns_per_group - 1) / columns_per_group, batch, 1},
                        {32 * kVectorSimdgroups, 1, 1});
    return;
  }
  if (takes_rowdot_kernel(params)) {
    KernelLaunch launch(shader_kernel("matmul.metal", "matmul_rowdot_" + suffix));
    bind(launch);
    const uint64_t outputs = uint64_t(M) * uint64_t(N);
    launch.threadgroups({(outputs + kRowDotSimdgroups - 1) / kRowDotSimdgroups, batch, 1},
                        {32 * kRowDotSimdgroups, 1, 1});
    return;
  }
  KernelLaunch launch(shader_kernel("matmul.metal", "matmul_naive_" + suffix));
  bind(launch);
  const uint64_t group_x = std::min<uint64_t>(uint64_t(N), 64);
  const uint64_t group_y = std::min<uint64_t>(uint64_t(M), std::max<uint64_t>(1, 256 / group_x));
  launch.threads({uint64_t(N), uint64_t(M), batch}, {group_x, group_y, 1});
}

// out = alpha * (a @ b) + beta * addend over a batch (3-D operands) or one matrix (2-D).
void encode_matmul(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                   const Tensor* addend, double beta, double alpha) {
  ETM_REQUIRE(a.dtype == b.dtype && out.dtype == a.dtype, op, ": dtypes differ (out ",
              dtype_name(out.dtype), ", operands ", dtype_name(a.dtype), " and ", dtype_name(b.dtype), ")");
  ETM_REQUIRE(!addend || addend->dtype == out.dtype, op, ": self has dtype ", dtype_name(addend->dtype),
              " but the product has ", dtype_name(out.dtype));
  const Batched ab = batched(a), bb = batched(b), ob = batched(out);
  ETM_REQUIRE(ab.sizes[2] == bb.sizes[1], op, ": cannot multiply shapes ", shape_text(a.sizes), " and ",
              shape_text(b.sizes), " (inner dimensions differ)");
  ETM_REQUIRE(ab.sizes[0] == bb.sizes[0], op, ": batch sizes differ: ", shape_text(a.sizes), " and ",
              shape_text(b.sizes));
  ETM_REQUIRE(ob.sizes[0] == ab.sizes[0] && ob.sizes[1] == ab.sizes[1] && ob.sizes[2] == bb.sizes[2], op,
              ": out has shape ", shape_text(out.sizes), " but the product of ", shape_text(a.sizes), " and ",
              shape_text(b.sizes), " needs ", (a.dim() == 3 ? concat("[", ab.sizes[0], ", ") : std::string("[")),
              ab.sizes[1], ", ", bb.sizes[2], "]");
  ETM_REQUIRE(!has_internal_overlap(out), op, ": out of shape ", shape_text(out.sizes),
              " has overlapping elements (a zero stride)");
  ETM_REQUIRE(!shares_memory(out, a) && !shares_memory(out, b), op,
              ": out overlaps an input matrix; the product cannot be written in place");

  MatmulParams params{};
  params.batch = ab.sizes[0];
  params.rows = ab.sizes[1];
  params.columns = bb.sizes[2];
  params.depth = ab.sizes[2];
  std::copy(ab.strides, ab.strides + 3, params.a_strides);
  std::copy(bb.strides, bb.strides + 3, params.b_strides);
  std::copy(ob.strides, ob.strides + 3, params.out_strides);
  params.alpha = static_cast<float>(alpha);
  params.beta = static_cast<float>(beta);
  params.has_addend = addend && beta != 0.0;
  if (addend) broadcast_strides(op, *addend, out, params.addend_strides);
  if (params.has_addend) {
    // Reading self and writing out element by element is safe only when they coincide.
    const bool same_elements = addend->storage_offset == out.storage_offset && addend->sizes == out.sizes &&
                               addend->strides == out.strides;
    ETM_REQUIRE(!shares_memory(out, *addend) || same_elements, op,
                ": out partially overlaps self; pass out == self or separate tensors");
  }

  if (out.numel() == 0) return;
  require_grid_extent(op, params.batch);
  require_grid_extent(op, params.rows);
  require_grid_extent(op, params.columns);

  const int64_t M = params.rows, N = params.columns, K = params.depth;
  // With K == 0 the operands are empty and may have no buffer; the kernel never reads them.
  const Tensor& a_bound = K == 0 ? out : a;
  const Tensor& b_bound = K == 0 ? out : b;
  if (K > 0 && encode_matmul_graph(out, a, b, params.has_addend ? addend : nullptr, params.addend_strides,
                                   alpha, beta))
    return;
  const Tensor& addend_bound = params.has_addend ? *addend : out;
  const std::string suffix = msl_float_type_name(out.dtype);
  const uint64_t batch = static_cast<uint64_t>(params.batch);

  if (K > 0 && std::min(M, N) < kTiledMinimum &&
      (launch_shape() == LaunchShape::cpu ? dispatch_gemv(out, a_bound, b_bound, addend_bound, params, suffix)
                                          : dispatch_few_rows(out, a_bound, b_bound, addend_bound, params, suffix)))
    return;
  if (K > 0 && std::min(M, N) >= kTiledMinimum && launch_shape() == LaunchShape::cpu &&
      dispatch_panels(out, a_bound, b_bound, addend_bound, params, suffix))
    return;
  auto bind = [&](KernelLaunch& launch) -> KernelLaunch& {
    return launch.tensor(0, out).tensor(1, a_bound).tensor(2, b_bound).tensor(3, addend_bound).value(4, params);
  };
  dispatch_matmul(bind, suffix, M, N, K, params, batch);
}

// Validates the operands of an entry point (`self` only for the add variants) and encodes it.
void checked_matmul(const char* op, int64_t dim, const Tensor& out, const Tensor* self,
                    const char* a_name, const Tensor& a, const char* b_name, const Tensor& b,
                    double beta, double alpha) {
  require_operand(op, a_name, a, dim);
  require_operand(op, b_name, b, dim);
  require_operand(op, "out", out, dim);
  if (self) {
    ETM_REQUIRE(self->device_type == kDeviceMps, op, ": self must be on device mps, not device type ",
                self->device_type);
  }
  encode_matmul(op, out, a, b, self, beta, alpha);
}

}  // namespace

void mm_out(const Tensor& out, const Tensor& self, const Tensor& mat2) {
  checked_matmul("mm", 2, out, nullptr, "self", self, "mat2", mat2, 0.0, 1.0);
}

void addmm_out(const Tensor& out, const Tensor& self, const Tensor& mat1, const Tensor& mat2,
               double beta, double alpha) {
  checked_matmul("addmm", 2, out, &self, "mat1", mat1, "mat2", mat2, beta, alpha);
}

void bmm_out(const Tensor& out, const Tensor& self, const Tensor& mat2) {
  checked_matmul("bmm", 3, out, nullptr, "self", self, "mat2", mat2, 0.0, 1.0);
}

void baddbmm_out(const Tensor& out, const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                 double beta, double alpha) {
  checked_matmul("baddbmm", 3, out, &self, "batch1", batch1, "batch2", batch2, beta, alpha);
}

}  // namespace etm::ops
