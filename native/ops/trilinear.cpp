#include "ops/trilinear.h"

#include <string>
#include <utility>

#include "ops/kernel_launch.h"
#include "ops/matmul.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/trilinear.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// From this many summed terms per output on, nn.Bilinear's form runs as two matrix products
// (both shapes) and any other form, in the GPU shape, as trilinear_simd.
constexpr int64_t kManyTerms = 64;
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

// Whether out[b, o] = sum_ij i1[b, i] i2[o, i, j] i3[b, j], nn.Bilinear's form: kept slots
// (b, o) and summed slots (i, j), where i1 is constant along o and j, i2 along b, and i3 along o
// and i (zero strides: expanded, broadcast or not varying).
bool is_bilinear_form(const TrilinearParams& p) {
  return p.kept_dims == 2 && p.sum_dims == 2 && p.kept_strides[0][1] == 0 && p.sum_strides[0][1] == 0 &&
         p.kept_strides[1][0] == 0 && p.kept_strides[2][1] == 0 && p.sum_strides[2][0] == 0;
}

// nn.Bilinear's form as two batched products (matmul.h), so the weight is read once per tile
// of the product rather than once per output. The longer of i and j is summed first: with i,
// tmp[o, b, j] = sum_i i1[b, i] i2[o, i, j] (a product per o), then out[b, o] = sum_j
// tmp[o, b, j] i3[b, j] (a matrix-vector product per b). The intermediate is of the inputs'
// dtype, as an eager bilinear's is.
void bilinear_products(const Tensor& i1, const Tensor& i2, const Tensor& i3, const TrilinearParams& p,
                       const Tensor& out) {
  struct Side {  // i1 with summed slot i, or i3 with j
    const Tensor* x;
    int64_t size;
    int64_t batch_stride;
    int64_t feature_stride;
    int64_t weight_stride;  // i2's along the slot
  };
  Side first{&i1, p.sum_sizes[0], p.kept_strides[0][0], p.sum_strides[0][0], p.sum_strides[1][0]};
  Side second{&i3, p.sum_sizes[1], p.kept_strides[2][0], p.sum_strides[2][1], p.sum_strides[1][1]};
  if (first.size < second.size) std::swap(first, second);
  const int64_t batch = p.kept_sizes[0], outputs = p.kept_sizes[1];
  const std::vector<int64_t> tmp_sizes{outputs, batch, second.size};
  auto tmp = Runtime::get().empty_tensor(tmp_sizes, contiguous_strides(tmp_sizes), out.dtype);
  bmm_out(*tmp, strided_view(*first.x, {outputs, batch, first.size}, {0, first.batch_stride, first.feature_stride}),
          strided_view(i2, {outputs, first.size, second.size},
                       {p.kept_strides[1][1], first.weight_stride, second.weight_stride}));
  bmm_out(strided_view(out, {batch, outputs, 1}, {outputs, 1, 1}),
          strided_view(*tmp, {batch, outputs, second.size}, {second.size, batch * second.size, 1}),
          strided_view(*second.x, {batch, second.size, 1}, {second.batch_stride, second.feature_stride, 0}));
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
  if (terms >= kManyTerms && is_bilinear_form(p)) {
    bilinear_products(i1, i2, i3, p, *out);
    return out;
  }
  // The GPU shape gives each output of many terms a simdgroup (a thread per output would walk
  // them all); on the CPU device a thread per output is fastest.
  const bool by_simdgroup = terms >= kManyTerms && launch_shape() == LaunchShape::gpu;
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
