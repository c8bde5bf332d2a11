#include "ops/trilinear.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/trilinear.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// From this many summed terms per output on, the GPU shape runs trilinear_simd.
constexpr int64_t kSimdgroupTerms = 64;
constexpr uint64_t kGroupSimdgroups = 4;  // per threadgroup of trilinear_simd

// Marks the dimensions `dims` names among `rank` (each wrapped once, as torch's dim_list_to_bitset).
std::vector<bool> dim_set(const char* op, const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<bool> set(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    ETM_REQUIRE(d >= -rank && d < rank, op, ": Dimension out of range (expected to be in range of [", -rank, ", ",
                rank - 1, "], but got ", d, ")");
    const size_t wrapped = static_cast<size_t>(d < 0 ? d + rank : d);
    ETM_REQUIRE(!set[wrapped], op, ": dim ", wrapped, " appears multiple times in the list of dims");
    set[wrapped] = true;
  }
  return set;
}

struct Unsqueezed {
  std::vector<int64_t> sizes;    // size 1 at expanded dimensions
  std::vector<int64_t> strides;  // 0 at expanded dimensions
};

Unsqueezed unsqueeze_at(const char* op, const Tensor& t, const std::vector<int64_t>& expand, int64_t rank) {
  ETM_REQUIRE(t.dim() + static_cast<int64_t>(expand.size()) == rank, op,
              ": every input needs the same rank once expanded: ", shape_text(t.sizes), " with ", expand.size(),
              " expanded dimensions is not of rank ", rank);
  const std::vector<bool> expanded = dim_set(op, expand, rank);
  Unsqueezed result;
  int64_t own = 0;
  for (int64_t d = 0; d < rank; ++d) {
    result.sizes.push_back(expanded[d] ? 1 : t.sizes[own]);
    result.strides.push_back(expanded[d] ? 0 : t.strides[own]);
    own += expanded[d] ? 0 : 1;
  }
  return result;
}

}  // namespace

std::unique_ptr<Tensor> trilinear(const Tensor& i1, const Tensor& i2, const Tensor& i3,
                                  const std::vector<int64_t>& expand1, const std::vector<int64_t>& expand2,
                                  const std::vector<int64_t>& expand3, const std::vector<int64_t>& sumdim,
                                  int64_t unroll_dim) {
  constexpr const char* op = "_trilinear";
  const Tensor* inputs[3] = {&i1, &i2, &i3};
  for (const Tensor* t : inputs) require_mps(op, "input", *t);
  const char* type = msl_float_type_name(i1.dtype);
  ETM_REQUIRE(type, op, ": dtype ", dtype_name(i1.dtype), " is not supported (float32, float16, bfloat16)");
  for (const Tensor* t : inputs) {
    ETM_REQUIRE(t->dtype == i1.dtype, op, ": expected scalar type ", dtype_name(i1.dtype), " but found ",
                dtype_name(t->dtype));
  }
  const int64_t rank = i1.dim() + static_cast<int64_t>(expand1.size());
  ETM_REQUIRE(rank <= kTrilinearMaxDims, op, ": at most ", kTrilinearMaxDims, " dimensions are supported, got ", rank);
  ETM_REQUIRE(unroll_dim >= 0 && unroll_dim < rank, op, ": unroll_dim must be in [0,", rank - 1, "]");
  const Unsqueezed views[3] = {unsqueeze_at(op, i1, expand1, rank), unsqueeze_at(op, i2, expand2, rank),
                               unsqueeze_at(op, i3, expand3, rank)};
  const std::vector<bool> summed = dim_set(op, sumdim, rank);
  TrilinearParams p{};
  std::vector<int64_t> out_sizes;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t size = 1;
    for (const Unsqueezed& v : views) {
      ETM_REQUIRE(v.sizes[d] == 1 || size == 1 || v.sizes[d] == size, op, ": non-broadcast dimensions must match");
      if (v.sizes[d] != 1) size = v.sizes[d];
    }
    const bool sum = summed[d];
    const uint32_t slot = sum ? p.sum_dims++ : p.kept_dims++;
    (sum ? p.sum_sizes : p.kept_sizes)[slot] = checked_u32(op, size, "size");
    for (int i = 0; i < 3; ++i) {
      (sum ? p.sum_strides : p.kept_strides)[i][slot] = views[i].sizes[d] == 1 ? 0 : views[i].strides[d];
    }
    if (!sum) out_sizes.push_back(size);
  }
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), i1.dtype);
  if (out->numel() == 0) return out;
  checked_u32(op, out->numel(), "number of output elements");
  int64_t terms = 1;
  for (uint32_t d = 0; d < p.sum_dims; ++d) terms *= p.sum_sizes[d];
  checked_u32(op, terms, "number of summed terms");
  // The GPU shape gives each output of many terms a simdgroup (a thread per output would walk
  // them all); on the CPU device a thread per output is fastest.
  const bool by_simdgroup = terms >= kSimdgroupTerms && launch_shape() == LaunchShape::gpu;
  KernelLaunch launch(
      shader_kernel("trilinear.metal", std::string(by_simdgroup ? "trilinear_simd_" : "trilinear_") + type));
  launch.tensor(0, i1).tensor(1, i2).tensor(2, i3).tensor(3, *out).value(4, p);
  if (by_simdgroup) {
    const uint64_t outputs = static_cast<uint64_t>(out->numel());
    launch.threadgroups({(outputs + kGroupSimdgroups - 1) / kGroupSimdgroups, 1, 1}, {32 * kGroupSimdgroups, 1, 1});
    return out;
  }
  const device::Size3 grid{static_cast<uint64_t>(out->numel()), 1, 1};
  launch.threads(grid, default_group(grid, launch));
  return out;
}

}  // namespace etm::ops
