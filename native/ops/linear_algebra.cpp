#include "ops/linear_algebra.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/linear_algebra.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

void require_float32(const char* op, const char* name, const Tensor& t) {
  require_mps(op, name, t);
  ETM_REQUIRE(t.dtype == static_cast<int32_t>(DType::float32), op, ": ", name, " has dtype ", dtype_name(t.dtype),
              "; the linear-algebra kernels take float32 (as torch's MPS backend)");
}

// The stride of `t`'s batch dimension `d` among `batch_dims` broadcast ones (0 where t lacks
// it or has size 1); `matrix_dims` trailing dimensions are not batch dimensions.
int64_t batch_stride(const Tensor& t, int64_t d, int64_t batch_dims, int64_t matrix_dims) {
  const int64_t own = d - (batch_dims - (t.dim() - matrix_dims));
  return own < 0 || t.sizes[own] == 1 ? 0 : t.strides[own];
}

// Broadcasts the batch dimensions of a and b (each with two matrix dimensions) into p; returns
// the broadcast batch shape.
std::vector<int64_t> broadcast_batches(const char* op, const Tensor& a, const Tensor& b, SolveParams& p) {
  const int64_t dims = std::max(a.dim(), b.dim()) - 2;
  ETM_REQUIRE(dims <= kLinalgMaxBatchDims, op, ": at most ", kLinalgMaxBatchDims, " batch dimensions are supported");
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t own_a = d - (dims - (a.dim() - 2)), own_b = d - (dims - (b.dim() - 2));
    const int64_t size_a = own_a < 0 ? 1 : a.sizes[own_a], size_b = own_b < 0 ? 1 : b.sizes[own_b];
    ETM_REQUIRE(size_a == size_b || size_a == 1 || size_b == 1, op, ": the batch dimensions of ",
                shape_text(a.sizes), " and ", shape_text(b.sizes), " do not broadcast");
    shape.push_back(size_a == 1 ? size_b : size_a);
    p.batch_sizes[d] = checked_u32(op, shape.back(), "batch size");
    p.a_batch_strides[d] = batch_stride(a, d, dims, 2);
    p.b_batch_strides[d] = batch_stride(b, d, dims, 2);
  }
  p.batch_dims = static_cast<uint32_t>(dims);
  return shape;
}

int64_t product(const std::vector<int64_t>& sizes) {
  int64_t result = 1;
  for (int64_t s : sizes) result *= s;
  return result;
}

std::vector<int64_t> with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t columns) {
  batch.push_back(rows);
  batch.push_back(columns);
  return batch;
}

// Encodes the substitution kernel for `p` (batch geometry, n, k and flags set) into x.
void encode_solve(const Tensor& a, const Tensor& b, const Tensor& x, const SolveParams& p, int64_t batches) {
  KernelLaunch launch(shader_kernel("linear_algebra.metal", "triangular_solve"));
  launch.tensor(0, a).tensor(1, b).tensor(2, x).value(3, p);
  const device::Size3 grid{p.k, static_cast<uint64_t>(batches), 1};
  launch.threads(grid, default_group(grid, launch));
}

// The strides of A's and b's matrices, and a row-major solution (p.k set).
void set_matrix_strides(SolveParams& p, const Tensor& a, const Tensor& b) {
  p.a_strides[0] = a.strides[a.dim() - 2];
  p.a_strides[1] = a.strides[a.dim() - 1];
  p.b_strides[0] = b.strides[b.dim() - 2];
  p.b_strides[1] = b.strides[b.dim() - 1];
  p.x_strides[0] = p.k;
  p.x_strides[1] = 1;
}

// Checks a square factor [*, n, n] and a right-hand side [*, n, k].
void check_system(const char* op, const Tensor& b, const Tensor& a) {
  require_float32(op, "b", b);
  require_float32(op, "A", a);
  ETM_REQUIRE(b.dim() >= 2, op, ": Expected b to have at least 2 dimensions, but it has ", b.dim(),
              " dimensions instead");
  ETM_REQUIRE(a.dim() >= 2, op, ": Expected A to have at least 2 dimensions, but it has ", a.dim(),
              " dimensions instead");
  ETM_REQUIRE(a.sizes[a.dim() - 1] == a.sizes[a.dim() - 2], op, ": A must be batches of square matrices, but they are ",
              a.sizes[a.dim() - 2], " by ", a.sizes[a.dim() - 1], " matrices");
  ETM_REQUIRE(a.sizes[a.dim() - 1] == b.sizes[b.dim() - 2], op, ": Incompatible matrix sizes: each A matrix is ",
              a.sizes[a.dim() - 2], " by ", a.sizes[a.dim() - 1], " but each b matrix is ", b.sizes[b.dim() - 2],
              " by ", b.sizes[b.dim() - 1]);
}

// Two substitutions: factor y = b, then factor^T x = y (lower), or factor^T y = b, then
// factor x = y (upper); b absent: the identity.
std::unique_ptr<Tensor> solve_with_factor(const char* op, const Tensor* b, const Tensor& factor, bool upper) {
  SolveParams p{};
  const int64_t n = factor.sizes.back();
  const int64_t k = b ? b->sizes.back() : n;
  const std::vector<int64_t> batch = broadcast_batches(op, factor, b ? *b : factor, p);
  const std::vector<int64_t> out_sizes = with_matrix(batch, n, k);
  Runtime& runtime = Runtime::get();
  auto out = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), factor.dtype);
  const int64_t batches = product(batch);
  if (out->numel() == 0) return out;
  p.n = checked_u32(op, n, "matrix size");
  p.k = checked_u32(op, k, "right-hand-side count");
  checked_u32(op, batches, "batch count");
  set_matrix_strides(p, factor, b ? *b : factor);
  p.identity_rhs = b ? 0 : 1;
  p.upper = upper ? 1 : 0;
  p.transpose = upper ? 1 : 0;
  auto intermediate = runtime.empty_tensor(out_sizes, contiguous_strides(out_sizes), factor.dtype);
  encode_solve(factor, b ? *b : factor, *intermediate, p, batches);
  // The second substitution reads the contiguous intermediate over the broadcast batch.
  const std::vector<int64_t> strides = contiguous_strides(out_sizes);
  for (size_t d = 0; d < batch.size(); ++d) p.b_batch_strides[d] = strides[d];
  p.b_strides[0] = k;
  p.b_strides[1] = 1;
  p.identity_rhs = 0;
  p.transpose = upper ? 0 : 1;
  encode_solve(factor, *intermediate, *out, p, batches);
  return out;
}

}  // namespace

TriangularSolveOutputs triangular_solve(const Tensor& b, const Tensor& a, bool upper, bool transpose, bool unit) {
  constexpr const char* op = "triangular_solve";
  check_system(op, b, a);
  SolveParams p{};
  const std::vector<int64_t> batch = broadcast_batches(op, a, b, p);
  const int64_t n = a.sizes.back(), k = b.sizes.back();
  Runtime& runtime = Runtime::get();
  TriangularSolveOutputs result;
  const std::vector<int64_t> solution_sizes = with_matrix(batch, n, k), coefficient_sizes = with_matrix(batch, n, n);
  result.solution = runtime.empty_tensor(solution_sizes, contiguous_strides(solution_sizes), a.dtype);
  result.coefficient = runtime.empty_tensor(coefficient_sizes, contiguous_strides(coefficient_sizes), a.dtype);
  const int64_t batches = product(batch);
  if (batches == 0 || n == 0) return result;
  p.n = checked_u32(op, n, "matrix size");
  p.k = checked_u32(op, k, "right-hand-side count");
  checked_u32(op, batches, "batch count");
  set_matrix_strides(p, a, b);
  p.upper = upper ? 1 : 0;
  p.transpose = transpose ? 1 : 0;
  p.unit = unit ? 1 : 0;
  if (k > 0) encode_solve(a, b, *result.solution, p, batches);
  KernelLaunch launch(shader_kernel("linear_algebra.metal", "copy_matrix"));
  launch.tensor(0, a).tensor(1, *result.coefficient).value(2, p);
  const device::Size3 grid{p.n, p.n, static_cast<uint64_t>(batches)};
  launch.threads(grid, default_group(grid, launch));
  return result;
}

std::unique_ptr<Tensor> linalg_solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left, bool unit) {
  constexpr const char* op = "linalg_solve_triangular";
  require_float32(op, "A", a);
  require_float32(op, "B", b);
  ETM_REQUIRE(a.dim() >= 2 && b.dim() >= 2, op, ": A and B must have at least 2 dimensions, got ",
              shape_text(a.sizes), " and ", shape_text(b.sizes));
  const int64_t n = a.sizes.back();
  ETM_REQUIRE(a.sizes[a.dim() - 2] == n, op, ": A must be batches of square matrices, got ", shape_text(a.sizes));
  // X A = B is A^T X^T = B^T: B's matrices are read transposed and X^T's written so.
  const int64_t b_rows = b.sizes[b.dim() - 2], b_columns = b.sizes.back();
  ETM_REQUIRE((left ? b_rows : b_columns) == n, op, ": incompatible shapes of A and B for the equation ",
              left ? "AX = B" : "XA = B", " (", n, "x", n, " and ", b_rows, "x", b_columns, ")");
  SolveParams p{};
  const std::vector<int64_t> batch = broadcast_batches(op, a, b, p);
  const std::vector<int64_t> out_sizes = with_matrix(batch, b_rows, b_columns);
  // Column-major matrices, as torch lays out this op's result.
  std::vector<int64_t> out_strides = contiguous_strides(out_sizes);
  out_strides[batch.size()] = 1;
  out_strides[batch.size() + 1] = b_rows;
  auto out = Runtime::get().empty_tensor(out_sizes, out_strides, a.dtype);
  const int64_t batches = product(batch);
  if (out->numel() == 0) return out;
  p.n = checked_u32(op, n, "matrix size");
  p.k = checked_u32(op, left ? b_columns : b_rows, "right-hand-side count");
  checked_u32(op, batches, "batch count");
  set_matrix_strides(p, a, b);
  if (left) {
    p.x_strides[0] = 1;
    p.x_strides[1] = n;
  } else {
    std::swap(p.b_strides[0], p.b_strides[1]);
  }
  p.upper = upper ? 1 : 0;
  p.transpose = left ? 0 : 1;
  p.unit = unit ? 1 : 0;
  encode_solve(a, b, *out, p, batches);
  return out;
}

std::unique_ptr<Tensor> cholesky_solve(const Tensor& b, const Tensor& factor, bool upper) {
  constexpr const char* op = "cholesky_solve";
  check_system(op, b, factor);
  return solve_with_factor(op, &b, factor, upper);
}

std::unique_ptr<Tensor> cholesky_inverse(const Tensor& factor, bool upper) {
  constexpr const char* op = "cholesky_inverse";
  require_float32(op, "input", factor);
  ETM_REQUIRE(factor.dim() >= 2, op, ": Expected input to have at least 2 dimensions, but it has ", factor.dim(),
              " dimensions instead");
  ETM_REQUIRE(factor.sizes[factor.dim() - 1] == factor.sizes[factor.dim() - 2], op,
              ": A must be batches of square matrices, but they are ", factor.sizes[factor.dim() - 2], " by ",
              factor.sizes[factor.dim() - 1], " matrices");
  return solve_with_factor(op, nullptr, factor, upper);
}

LuUnpackOutputs lu_unpack(const Tensor& lu, const Tensor& pivots, bool unpack_data, bool unpack_pivots) {
  constexpr const char* op = "lu_unpack";
  require_float32(op, "LU_data", lu);
  require_mps(op, "LU_pivots", pivots);
  ETM_REQUIRE(pivots.dtype == static_cast<int32_t>(DType::int32), op,
              ": LU_pivots is expected to be a contiguous tensor of torch.int32 dtype, but got ",
              dtype_name(pivots.dtype));
  ETM_REQUIRE(lu.dim() >= 2, op, ": LU_data must have at least 2 dimensions, got ", lu.dim());
  const int64_t m = lu.sizes[lu.dim() - 2], n = lu.sizes[lu.dim() - 1], k = std::min(m, n);
  std::vector<int64_t> batch(lu.sizes.begin(), lu.sizes.end() - 2);
  std::vector<int64_t> pivot_sizes = batch;
  pivot_sizes.push_back(k);
  ETM_REQUIRE(pivots.sizes == pivot_sizes, op, ": LU_pivots of shape ", shape_text(pivots.sizes),
              " does not match LU_data of shape ", shape_text(lu.sizes), " (expected ", shape_text(pivot_sizes), ")");
  ETM_REQUIRE(batch.size() <= static_cast<size_t>(kLinalgMaxBatchDims), op, ": at most ", kLinalgMaxBatchDims,
              " batch dimensions are supported");
  Runtime& runtime = Runtime::get();
  LuUnpackOutputs result;
  auto sized = [&](const std::vector<int64_t>& sizes) {
    return runtime.empty_tensor(sizes, contiguous_strides(sizes), lu.dtype);
  };
  result.permutation = unpack_pivots ? sized(with_matrix(batch, m, m)) : sized({0});
  result.lower = unpack_data ? sized(with_matrix(batch, m, k)) : sized({0});
  result.upper = unpack_data ? sized(with_matrix(batch, k, n)) : sized({0});
  const int64_t batches = product(batch);
  if (batches == 0 || m == 0) return result;
  LuParams p{};
  for (size_t d = 0; d < batch.size(); ++d) {
    p.batch_sizes[d] = checked_u32(op, batch[d], "batch size");
    p.lu_batch_strides[d] = batch[d] == 1 ? 0 : lu.strides[d];
    p.pivot_batch_strides[d] = batch[d] == 1 ? 0 : pivots.strides[d];
  }
  p.batch_dims = static_cast<uint32_t>(batch.size());
  p.lu_strides[0] = lu.strides[lu.dim() - 2];
  p.lu_strides[1] = lu.strides[lu.dim() - 1];
  p.pivot_stride = pivots.strides[pivots.dim() - 1];
  p.m = checked_u32(op, m, "row count");
  p.n = checked_u32(op, n, "column count");
  p.k = static_cast<uint32_t>(k);
  checked_u32(op, batches * m * std::max(m, n), "number of output elements");
  if (unpack_data) {
    for (const auto& [name, out, rows, columns] :
         {std::tuple{"lu_lower", result.lower.get(), m, k}, std::tuple{"lu_upper", result.upper.get(), k, n}}) {
      if (out->numel() == 0) continue;
      KernelLaunch launch(shader_kernel("linear_algebra.metal", name));
      launch.tensor(0, lu).tensor(1, *out).value(2, p);
      const device::Size3 grid{static_cast<uint64_t>(columns), static_cast<uint64_t>(rows),
                               static_cast<uint64_t>(batches)};
      launch.threads(grid, default_group(grid, launch));
    }
  }
  if (unpack_pivots) {
    Stream& stream = runtime.current_stream();
    const Tensor& permutation = *result.permutation;
    stream.fill_buffer(permutation.storage->buffer, permutation.buffer_offset(),
                       static_cast<size_t>(permutation.numel()) * sizeof(float), 0);
    auto order =
        runtime.empty_tensor({batches, m}, contiguous_strides({batches, m}), static_cast<int32_t>(DType::int64));
    std::shared_ptr<Tensor> fault = new_fault_record();
    KernelLaunch launch(shader_kernel("linear_algebra.metal", "lu_permutation"));
    launch.tensor(0, pivots).tensor(1, *order).tensor(2, permutation).tensor(3, *fault).value(4, p);
    launch.completion_check([fault, m]() -> std::string {
      const Fault seen = read_fault_record(*fault);
      if (seen.number < 0) return {};
      return concat("lu_unpack: pivot ", seen.value, " is out of range [1, ", m, "]");
    });
    const device::Size3 grid{static_cast<uint64_t>(batches), 1, 1};
    launch.threads(grid, default_group(grid, launch));
  }
  return result;
}

}  // namespace etm::ops
