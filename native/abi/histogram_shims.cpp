// aoti_torch_mps_histc, _histogram_bin_ct, __histogramdd_from_bin_cts (etmetal/fallback_reductions.h).
#include <optional>
#include <vector>

#include "abi/guard.h"
#include "abi/shim_arguments.h"
#include "etmetal/fallback_reductions.h"
#include "ops/histogram.h"

using etm::abi::guarded_encoding;
using etm::abi::int_list;
using etm::abi::new_handle;
using etm::abi::require_out;
using etm::abi::tensor_of;

extern "C" AOTITorchError aoti_torch_mps_histc(AtenTensorHandle self, int64_t bins, double min,
                                               double max, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::histc(tensor_of(self), bins, min, max));
  });
}

namespace {

// An optional float list as AOTI passes it: NULL, or a pointer to `count` values.
std::optional<std::vector<double>> optional_double_list(const double** values, int64_t count, const char* name) {
  if (!values) return std::nullopt;
  ETM_REQUIRE(count >= 0, name, " has negative length ", count);
  ETM_REQUIRE(*values || count == 0, name, " is null with length ", count);
  return std::vector<double>(*values, *values + count);
}

}  // namespace

extern "C" AOTITorchError aoti_torch_mps_histogram_bin_ct(AtenTensorHandle self, int64_t bins,
                                                          const double** range, int64_t range_len_,
                                                          AtenTensorHandle* weight, int32_t density,
                                                          AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    require_out(ret1, "ret1");
    auto outputs = etm::ops::histogram(tensor_of(self), bins, optional_double_list(range, range_len_, "range"),
                                       weight ? &tensor_of(*weight) : nullptr, density != 0);
    *ret0 = new_handle(std::move(outputs.hist));
    *ret1 = new_handle(std::move(outputs.edges));
  });
}

extern "C" AOTITorchError aoti_torch_mps__histogramdd_from_bin_cts(AtenTensorHandle self, const int64_t* bins,
                                                                   int64_t bins_len_, const double** range,
                                                                   int64_t range_len_, AtenTensorHandle* weight,
                                                                   int32_t density, AtenTensorHandle* ret0) {
  return guarded_encoding(__func__, [&] {
    require_out(ret0, "ret0");
    *ret0 = new_handle(etm::ops::histogramdd_from_bin_cts(
        tensor_of(self), int_list(bins, bins_len_, "bins"), optional_double_list(range, range_len_, "range"),
        weight ? &tensor_of(*weight) : nullptr, density != 0));
  });
}
