// The complex-number and Fourier-transform fallbacks (etmetal/fallback_spectral.h).
#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_spectral.h"
#include "ops/complex.h"
#include "ops/fft.h"

using etm::abi::guarded;
using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps__fft_r2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                 int64_t normalization, int32_t onesided, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::fft_r2c(tensor_of(self), int_list(dim, dim_len_, "dim"), normalization, onesided != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps__fft_c2c(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                 int64_t normalization, int32_t forward, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::fft_c2c(tensor_of(self), int_list(dim, dim_len_, "dim"), normalization, forward != 0));
  });
}

extern "C" AOTITorchError aoti_torch_mps__fft_c2r(AtenTensorHandle self, const int64_t* dim, int64_t dim_len_,
                                                 int64_t normalization, int64_t last_dim_size, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::fft_c2r(tensor_of(self), int_list(dim, dim_len_, "dim"), normalization, last_dim_size));
  });
}

extern "C" AOTITorchError aoti_torch_mps_polar(AtenTensorHandle abs, AtenTensorHandle angle, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::polar(tensor_of(abs), tensor_of(angle)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_view_as_real(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::view_as_real(tensor_of(self)));
  });
}

extern "C" AOTITorchError aoti_torch_mps_view_as_complex(AtenTensorHandle self, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::view_as_complex(tensor_of(self)));
  });
}
