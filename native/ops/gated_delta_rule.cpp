#include "ops/gated_delta_rule.h"

#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/gated_delta_rule.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

template <size_t N>
void copy_strides(const Tensor& t, int64_t (&out)[N]) {
  for (size_t i = 0; i < N; ++i) out[i] = t.strides[i];
}

void require_shape(const char* op, const char* what, const Tensor& t, std::initializer_list<int64_t> shape,
                   const char* names) {
  bool same = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = t.sizes[i] == shape.begin()[i];
  if (same) return;
  std::string expected, actual;
  for (int64_t s : shape) expected += (expected.empty() ? "" : ", ") + std::to_string(s);
  for (int64_t s : t.sizes) actual += (actual.empty() ? "" : ", ") + std::to_string(s);
  fail(op, ": ", what, " must have shape [", expected, "] (", names, "), got [", actual, "]");
}

}  // namespace

std::unique_ptr<Tensor> gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& g, const Tensor& beta, Tensor& state) {
  constexpr const char* op = "gated_delta_rule";
  require_device_tensor(op, "Q", q, 4);
  require_device_tensor(op, "V", v, 4);
  const char* type_name = activation_type_name(op, "Q", q);
  const int64_t B = q.sizes[0], T = q.sizes[1], Hk = q.sizes[2], Dk = q.sizes[3];
  const int64_t Hv = v.sizes[2], Dv = v.sizes[3];
  for (int64_t size : {B, T, Hk, Dk, Hv, Dv})
    ETM_REQUIRE(size <= kMaxInt32Extent, op, ": a dimension is too large: ", size);
  ETM_REQUIRE(Dk > 0 && Dk % 32 == 0, op, ": Dk (Q.size(3)) must be a positive multiple of 32, got ", Dk);
  ETM_REQUIRE(Dv > 0 && Dv % 32 == 0, op, ": Dv (V.size(3)) must be a positive multiple of 32, got ", Dv);
  ETM_REQUIRE(Hk > 0 && Hv % Hk == 0, op, ": the key heads Hk = ", Hk,
              " must divide the value heads Hv = ", Hv);
  require_shape(op, "K", k, {B, T, Hk, Dk}, "B, T, Hk, Dk");
  require_shape(op, "V", v, {B, T, Hv, Dv}, "B, T, Hv, Dv");
  require_shape(op, "G", g, {B, T, Hv}, "B, T, Hv");
  require_shape(op, "Beta", beta, {B, T, Hv}, "B, T, Hv");
  require_shape(op, "State", state, {B, Hv, Dv, Dk}, "B, Hv, Dv, Dk");
  using Named = std::pair<const char*, const Tensor*>;
  for (const auto& [what, t] :
       {Named{"K", &k}, Named{"V", &v}, Named{"G", &g}, Named{"Beta", &beta}}) {
    require_device_tensor(op, what, *t, t->dim());
    ETM_REQUIRE(t->dtype == q.dtype, op, ": ", what, " must have Q's dtype ", dtype_name(q.dtype), ", got ",
                dtype_name(t->dtype));
  }
  require_device_tensor(op, "State", state, 4);
  const bool float_state = state.dtype == static_cast<int32_t>(DType::float32);
  ETM_REQUIRE(float_state || state.dtype == q.dtype, op, ": State must be float32 or Q's dtype ",
              dtype_name(q.dtype), ", got ", dtype_name(state.dtype));
  // Keep the state row in registers where it fits (Dk / 32 values per lane). Only a float32
  // row can live in device memory between steps without rounding each step.
  const int64_t per_lane = Dk / 32;
  ETM_REQUIRE(float_state || per_lane <= 16, op, ": a ", dtype_name(state.dtype),
              " State needs Dk <= 512 (got ", Dk, "); pass a float32 State");

  auto y = Runtime::get().empty_tensor({B, T, Hv, Dv}, contiguous_strides({B, T, Hv, Dv}), q.dtype);
  if (B == 0 || T == 0 || Hv == 0) return y;
  GatedDeltaRuleParams params{};
  params.B = static_cast<int32_t>(B);
  params.T = static_cast<int32_t>(T);
  params.Hk = static_cast<int32_t>(Hk);
  params.Hv = static_cast<int32_t>(Hv);
  params.Dk = static_cast<int32_t>(Dk);
  params.Dv = static_cast<int32_t>(Dv);
  copy_strides(q, params.q_strides);
  copy_strides(k, params.k_strides);
  copy_strides(v, params.v_strides);
  copy_strides(g, params.g_strides);
  copy_strides(beta, params.beta_strides);
  copy_strides(state, params.state_strides);
  const char* variant = per_lane <= 4 ? "_4" : per_lane <= 16 ? "_16" : "_streaming";
  const std::string state_part = float_state ? "" : std::string("_state_") + type_name;
  const std::string name = std::string("gated_delta_rule_") + type_name + state_part + variant;
  KernelLaunch(shader_kernel("gated_delta_rule.metal", name))
      .tensor(0, q).tensor(1, k).tensor(2, v).tensor(3, g).tensor(4, beta).tensor(5, state)
      .tensor(6, *y).value(7, params)
      .threadgroups({static_cast<uint64_t>(Dv / 4), static_cast<uint64_t>(B * Hv), 1}, {32, 4, 1});
  return y;
}

}  // namespace etm::ops
