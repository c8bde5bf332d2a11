#include "ops/matmul_compositions.h"

#include "ops/matmul.h"
#include "ops/op_support.h"
#include "ops/shape.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

void require_operands(const char* op, std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands) require_mps(op, "operand", *t);
  const int32_t dtype = (*operands.begin())->dtype;
  ETM_REQUIRE(msl_float_type_name(dtype), op, ": dtype ", dtype_name(dtype),
              " is not supported (float32, float16, bfloat16)");
  for (const Tensor* t : operands) {
    ETM_REQUIRE(t->dtype == dtype, op, ": expected all operands to have one dtype, got ", dtype_name(dtype), " and ",
                dtype_name(t->dtype));
  }
}

}  // namespace

std::unique_ptr<Tensor> addmv(const Tensor& self, const Tensor& mat, const Tensor& vec, double beta, double alpha) {
  constexpr const char* op = "addmv";
  require_operands(op, {&self, &mat, &vec});
  ETM_REQUIRE(mat.dim() == 2 && vec.dim() == 1 && self.dim() <= 1, op,
              ": vector + matrix @ vector expected, got ", self.dim(), ", ", mat.dim(), ", ", vec.dim());
  const int64_t rows = mat.sizes[0];
  ETM_REQUIRE(mat.sizes[1] == vec.sizes[0] && (self.numel() == 1 || (self.dim() == 1 && self.sizes[0] == rows)), op,
              ": size mismatch, got input (", self.dim() == 1 ? self.sizes[0] : 1, "), mat (", rows, "x",
              mat.sizes[1], "), vec (", vec.sizes[0], ")");
  auto out = Runtime::get().empty_tensor({rows}, {1}, self.dtype);
  if (rows == 0) return out;
  const Tensor column = strided_view(vec, {vec.sizes[0], 1}, {vec.strides[0], 1});
  const bool vector_self = self.dim() == 1;
  const Tensor addend = strided_view(self, {vector_self ? self.sizes[0] : 1, 1}, {vector_self ? self.strides[0] : 0, 0});
  addmm_out(strided_view(*out, {rows, 1}, {1, 1}), addend, mat, column, beta, alpha);
  return out;
}

std::unique_ptr<Tensor> addbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, double beta,
                               double alpha) {
  constexpr const char* op = "addbmm";
  require_operands(op, {&self, &batch1, &batch2});
  ETM_REQUIRE(batch1.dim() == 3, op, ": batch1 must be a 3D tensor");
  ETM_REQUIRE(batch2.dim() == 3, op, ": batch2 must be a 3D tensor");
  ETM_REQUIRE(batch1.sizes[0] == batch2.sizes[0], op, ": batch1 and batch2 must have same number of batches, got ",
              batch1.sizes[0], " and ", batch2.sizes[0]);
  ETM_REQUIRE(batch1.sizes[2] == batch2.sizes[1], op, ": Incompatible matrix sizes for bmm (", batch1.sizes[1], "x",
              batch1.sizes[2], " and ", batch2.sizes[1], "x", batch2.sizes[2], ")");
  const int64_t batches = batch1.sizes[0], rows = batch1.sizes[1], inner = batch1.sizes[2], columns = batch2.sizes[2];
  auto out = Runtime::get().empty_tensor({rows, columns}, contiguous_strides({rows, columns}), self.dtype);
  if (out->numel() == 0) return out;
  // [N, B * M] @ [B * M, P]: each product term batch1[b, n, m] * batch2[b, m, p] once.
  std::unique_ptr<Tensor> left = reshape(*permute(batch1, {1, 0, 2}), {rows, batches * inner});
  std::unique_ptr<Tensor> right = reshape(batch2, {batches * inner, columns});
  addmm_out(*out, self, *left, *right, beta, alpha);
  return out;
}

}  // namespace etm::ops
