// The gated delta rule (linear attention with a delta-rule state update) over a whole
// sequence in one dispatch. Per batch b and value head h (key head h / (Hv / Hk)), with the
// state S [Dv, Dk] (float32, or the input dtype) accumulated in float and g already
// exponentiated:
//   S = g_t S;  delta = beta_t (v_t - S k_t);  S = S + delta k_t^T;  y_t = S q_t.
//
// One simdgroup owns one state row (b, h, dv): lane l holds S[dv, 32 i + l] for i < Dk / 32,
// so both dot products along Dk are one simd_sum, and the row is read and written once for the
// whole sequence, so a 16-bit state is rounded once, at the end, as ExecuTorch's kernel does.
// The register-resident kernel holds up to CAPACITY values per lane; longer rows use the
// streaming kernel, which keeps a float32 row in device memory (same results).
#include <metal_stdlib>
using namespace metal;
#include "params/gated_delta_rule.h"

struct RowCoordinates {
  int b;
  int hv;
  int hk;
  int dv;
};

inline RowCoordinates row_of(constant GatedDeltaRuleParams& p, uint3 group_id, uint simd_group) {
  RowCoordinates row;
  row.dv = int(group_id.x) * 4 + int(simd_group);
  row.b = int(group_id.y) / p.Hv;
  row.hv = int(group_id.y) % p.Hv;
  row.hk = row.hv / (p.Hv / p.Hk);
  return row;
}

template <typename T, typename S, int CAPACITY>
kernel void gated_delta_rule(const device T* q [[buffer(0)]],
                             const device T* k [[buffer(1)]],
                             const device T* v [[buffer(2)]],
                             const device T* g [[buffer(3)]],
                             const device T* beta [[buffer(4)]],
                             device S* state [[buffer(5)]],
                             device T* y [[buffer(6)]],
                             constant GatedDeltaRuleParams& p [[buffer(7)]],
                             uint3 group_id [[threadgroup_position_in_grid]],
                             uint simd_group [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]]) {
  const RowCoordinates row = row_of(p, group_id, simd_group);
  const int per_lane = p.Dk / 32;
  device S* s_row = state + row.b * p.state_strides[0] + row.hv * p.state_strides[1] +
                    row.dv * p.state_strides[2];
  const long s_step = 32 * p.state_strides[3];
  const long q_step = 32 * p.q_strides[3];
  const long k_step = 32 * p.k_strides[3];

  float s[CAPACITY];
  for (int i = 0; i < CAPACITY; ++i)
    s[i] = i < per_lane ? float(s_row[lane * p.state_strides[3] + i * s_step]) : 0.0f;

  const device T* q_t =
      q + row.b * p.q_strides[0] + row.hk * p.q_strides[2] + lane * p.q_strides[3];
  const device T* k_t =
      k + row.b * p.k_strides[0] + row.hk * p.k_strides[2] + lane * p.k_strides[3];
  const device T* v_t =
      v + row.b * p.v_strides[0] + row.hv * p.v_strides[2] + row.dv * p.v_strides[3];
  const device T* g_t = g + row.b * p.g_strides[0] + row.hv * p.g_strides[2];
  const device T* beta_t = beta + row.b * p.beta_strides[0] + row.hv * p.beta_strides[2];
  device T* y_t = y + ((long(row.b) * p.T * p.Hv) + row.hv) * p.Dv + row.dv;
  const long y_step = long(p.Hv) * p.Dv;

  for (int t = 0; t < p.T; ++t) {
    const float decay = float(*g_t);
    float key[CAPACITY];
    float projected = 0.0f;
    for (int i = 0; i < CAPACITY; ++i) {
      if (i < per_lane) {
        key[i] = float(k_t[i * k_step]);
        s[i] *= decay;
        projected += s[i] * key[i];
      }
    }
    const float delta = float(*beta_t) * (float(*v_t) - simd_sum(projected));
    float out = 0.0f;
    for (int i = 0; i < CAPACITY; ++i) {
      if (i < per_lane) {
        s[i] += key[i] * delta;
        out += s[i] * float(q_t[i * q_step]);
      }
    }
    out = simd_sum(out);
    if (lane == 0) *y_t = T(out);
    q_t += p.q_strides[1];
    k_t += p.k_strides[1];
    v_t += p.v_strides[1];
    g_t += p.g_strides[1];
    beta_t += p.beta_strides[1];
    y_t += y_step;
  }
  for (int i = 0; i < per_lane && i < CAPACITY; ++i)
    s_row[lane * p.state_strides[3] + i * s_step] = S(s[i]);
}

// Any Dk: the state row stays in device memory and each step passes over it twice.
template <typename T>
kernel void gated_delta_rule_streaming(const device T* q [[buffer(0)]],
                                       const device T* k [[buffer(1)]],
                                       const device T* v [[buffer(2)]],
                                       const device T* g [[buffer(3)]],
                                       const device T* beta [[buffer(4)]],
                                       device float* state [[buffer(5)]],
                                       device T* y [[buffer(6)]],
                                       constant GatedDeltaRuleParams& p [[buffer(7)]],
                                       uint3 group_id [[threadgroup_position_in_grid]],
                                       uint simd_group [[simdgroup_index_in_threadgroup]],
                                       uint lane [[thread_index_in_simdgroup]]) {
  const RowCoordinates row = row_of(p, group_id, simd_group);
  device float* s_row = state + row.b * p.state_strides[0] + row.hv * p.state_strides[1] +
                        row.dv * p.state_strides[2];
  for (int t = 0; t < p.T; ++t) {
    const device T* q_t = q + row.b * p.q_strides[0] + t * p.q_strides[1] + row.hk * p.q_strides[2];
    const device T* k_t = k + row.b * p.k_strides[0] + t * p.k_strides[1] + row.hk * p.k_strides[2];
    const float decay =
        float(g[row.b * p.g_strides[0] + t * p.g_strides[1] + row.hv * p.g_strides[2]]);
    const float gate =
        float(beta[row.b * p.beta_strides[0] + t * p.beta_strides[1] + row.hv * p.beta_strides[2]]);
    const float value = float(v[row.b * p.v_strides[0] + t * p.v_strides[1] +
                                row.hv * p.v_strides[2] + row.dv * p.v_strides[3]]);
    float projected = 0.0f;
    for (int d = int(lane); d < p.Dk; d += 32)
      projected += s_row[d * p.state_strides[3]] * decay * float(k_t[d * p.k_strides[3]]);
    const float delta = gate * (value - simd_sum(projected));
    float out = 0.0f;
    for (int d = int(lane); d < p.Dk; d += 32) {
      device float& cell = s_row[d * p.state_strides[3]];
      cell = cell * decay + float(k_t[d * p.k_strides[3]]) * delta;
      out += cell * float(q_t[d * p.q_strides[3]]);
    }
    out = simd_sum(out);
    if (lane == 0) y[((long(row.b) * p.T + t) * p.Hv + row.hv) * p.Dv + row.dv] = T(out);
  }
}

#define ETM_GDR_ARGUMENTS(T, S)                                                               \
  const device T* q [[buffer(0)]], const device T* k [[buffer(1)]],                          \
      const device T* v [[buffer(2)]], const device T* g [[buffer(3)]],                      \
      const device T* beta [[buffer(4)]], device S* state [[buffer(5)]],                     \
      device T* y [[buffer(6)]], constant GatedDeltaRuleParams& p [[buffer(7)]],             \
      uint3 group_id [[threadgroup_position_in_grid]],                                       \
      uint simd_group [[simdgroup_index_in_threadgroup]],                                    \
      uint lane [[thread_index_in_simdgroup]]

// Kernel names: gated_delta_rule_{float,half,bfloat}_{4,16,streaming} for a float32 state,
// gated_delta_rule_{half,bfloat}_state_{half,bfloat}_{4,16} for a state in the input dtype:
// the number is the register capacity per lane (Dk up to 128 or 512).
#define ETM_GDR_TYPE(T)                                                                       \
  template [[host_name("gated_delta_rule_" #T "_4")]] kernel void                            \
  gated_delta_rule<T, float, 4>(ETM_GDR_ARGUMENTS(T, float));                                \
  template [[host_name("gated_delta_rule_" #T "_16")]] kernel void                           \
  gated_delta_rule<T, float, 16>(ETM_GDR_ARGUMENTS(T, float));                               \
  template [[host_name("gated_delta_rule_" #T "_streaming")]] kernel void                    \
  gated_delta_rule_streaming<T>(ETM_GDR_ARGUMENTS(T, float));

#define ETM_GDR_STATE_IN_INPUT_TYPE(T)                                                        \
  template [[host_name("gated_delta_rule_" #T "_state_" #T "_4")]] kernel void               \
  gated_delta_rule<T, T, 4>(ETM_GDR_ARGUMENTS(T, T));                                        \
  template [[host_name("gated_delta_rule_" #T "_state_" #T "_16")]] kernel void              \
  gated_delta_rule<T, T, 16>(ETM_GDR_ARGUMENTS(T, T));

ETM_GDR_TYPE(float)
ETM_GDR_TYPE(half)
ETM_GDR_TYPE(bfloat)
ETM_GDR_STATE_IN_INPUT_TYPE(half)
ETM_GDR_STATE_IN_INPUT_TYPE(bfloat)
