// Triangular solves, Cholesky solves and LU unpacking as MSL kernels
// (shaders/linear_algebra.metal), ATen semantics, float32. Correct first: one thread solves one
// right-hand-side column by substitution.
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

struct TriangularSolveOutputs {
  std::unique_ptr<Tensor> solution;     // [*batch, n, k], contiguous
  std::unique_ptr<Tensor> coefficient;  // A broadcast to the batch, a contiguous copy
};

// Solves A x = b (A^T x = b with `transpose`) for triangular A [*, n, n] (upper or lower; with
// `unit` its diagonal counts as 1) and b [*, n, k]; batch dimensions broadcast.
TriangularSolveOutputs triangular_solve(const Tensor& b, const Tensor& a, bool upper, bool transpose, bool unit);

// linalg.solve_triangular: X with A X = B (`left`) or X A = B for triangular A [*, n, n] and
// B [*, n, k] (or [*, k, n]); batch dimensions broadcast. X's matrices are column-major, as
// torch returns them.
std::unique_ptr<Tensor> linalg_solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool left, bool unit);

// Solves (L L^T) x = b, or (U^T U) x = b with `upper`, for the Cholesky factor [*, n, n] and
// b [*, n, k]; batch dimensions broadcast.
std::unique_ptr<Tensor> cholesky_solve(const Tensor& b, const Tensor& factor, bool upper);

// (L L^T)^-1, or (U^T U)^-1 with `upper`, of the Cholesky factor [*, n, n].
std::unique_ptr<Tensor> cholesky_inverse(const Tensor& factor, bool upper);

struct LuUnpackOutputs {
  std::unique_ptr<Tensor> permutation;  // P [*, m, m], or an empty [0] without unpack_pivots
  std::unique_ptr<Tensor> lower;        // L [*, m, min(m, n)], unit diagonal; [0] without unpack_data
  std::unique_ptr<Tensor> upper;        // U [*, min(m, n), n]; [0] without unpack_data
};

// P, L and U with A = P L U from lu_factor's LU [*, m, n] (float32) and 1-based int32 pivots
// [*, min(m, n)] (n 0: P is the identity). A pivot outside [1, m] is reported at the next
// synchronize.
LuUnpackOutputs lu_unpack(const Tensor& lu, const Tensor& pivots, bool unpack_data, bool unpack_pivots);

}  // namespace etm::ops
