// The linear-algebra fallbacks (etmetal/fallback_linear_algebra.h).
#include "abi/guard.h"
#include "etmetal/fallback_linear_algebra.h"
#include "ops/linear_algebra.h"

using etm::abi::guarded_encoding;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_triangular_solve(AtenTensorHandle self, AtenTensorHandle A, int32_t upper,
                                                         int32_t transpose, int32_t unitriangular,
                                                         AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    etm::ops::TriangularSolveOutputs outputs =
        etm::ops::triangular_solve(tensor_of(self), tensor_of(A), upper != 0, transpose != 0, unitriangular != 0);
    *ret0 = new_handle(std::move(outputs.solution));
    *ret1 = new_handle(std::move(outputs.coefficient));
  });
}

extern "C" AOTITorchError aoti_torch_mps_linalg_solve_triangular(AtenTensorHandle self, AtenTensorHandle B,
                                                                 int32_t upper, int32_t left, int32_t unitriangular,
                                                                 AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::linalg_solve_triangular(tensor_of(self), tensor_of(B), upper != 0, left != 0,
                                                         unitriangular != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps_cholesky_solve(AtenTensorHandle self, AtenTensorHandle input2,
                                                       int32_t upper, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::cholesky_solve(tensor_of(self), tensor_of(input2), upper != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps_cholesky_inverse(AtenTensorHandle self, int32_t upper,
                                                         AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::cholesky_inverse(tensor_of(self), upper != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps_lu_unpack(AtenTensorHandle LU_data, AtenTensorHandle LU_pivots,
                                                  int32_t unpack_data, int32_t unpack_pivots, AtenTensorHandle* ret0,
                                                  AtenTensorHandle* ret1, AtenTensorHandle* ret2) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    require_out(ret2, "ret2");
    etm::ops::LuUnpackOutputs outputs =
        etm::ops::lu_unpack(tensor_of(LU_data), tensor_of(LU_pivots), unpack_data != 0, unpack_pivots != 0);
    *ret0 = new_handle(std::move(outputs.permutation));
    *ret1 = new_handle(std::move(outputs.lower));
    *ret2 = new_handle(std::move(outputs.upper));
  });
}
