// Random-number ops: one thread per element, each drawing from Philox4x32-10 keyed by the
// generator's seed with the counter (offset + element index), so a call's values depend only
// on (seed, offset) and not on how the grid is split. Elements are written at their strided
// positions (in-place ops on views).
//   random_uniform   from + u (to - from), u in [0, 1) with as many random bits as T's mantissa
//   random_normal    mean + std z, z standard normal by Box-Muller
//   random_exponential  -log(1 - u) / lambda
//   random_int       low + r mod range, r 32 random bits (64 when the range needs them)
//   random_bernoulli u < p (p a scalar, or an element of a probability tensor)
#include <metal_stdlib>
using namespace metal;
#include "params/random.h"

inline uint2 mul_hi_lo(uint a, uint b) {
  const ulong product = ulong(a) * ulong(b);
  return uint2(uint(product >> 32), uint(product));
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
inline uint4 philox(ulong seed, ulong counter) {
  uint4 c = uint4(uint(counter), uint(counter >> 32), 0u, 0u);
  uint2 key = uint2(uint(seed), uint(seed >> 32));
  for (int round = 0; round < 10; ++round) {
    const uint2 p0 = mul_hi_lo(0xD2511F53u, c.x);
    const uint2 p1 = mul_hi_lo(0xCD9E8D57u, c.z);
    c = uint4(p1.x ^ c.y ^ key.x, p1.y, p0.x ^ c.w ^ key.y, p0.y);
    key += uint2(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}

// u in [0, 1) from the low `bits` bits of r: exact in any float type of >= bits mantissa bits.
inline float unit(uint r, uint bits) { return float(r & ((1u << bits) - 1u)) * exp2(-float(bits)); }

template <typename T> struct Mantissa { static constant constexpr uint bits = 24; };
template <> struct Mantissa<half> { static constant constexpr uint bits = 11; };
template <> struct Mantissa<bfloat> { static constant constexpr uint bits = 8; };

template <typename T>
kernel void random_uniform(device T* out [[buffer(0)]], constant RandomParams& p [[buffer(1)]],
                           uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  const uint4 r = philox(p.seed, p.offset + i);
  out[element_offset(i, p.sizes, p.strides, p.dims)] = T(p.a + unit(r.x, Mantissa<T>::bits) * (p.b - p.a));
}

template <typename T>
kernel void random_normal(device T* out [[buffer(0)]], constant RandomParams& p [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  const uint4 r = philox(p.seed, p.offset + i);
  const float u1 = 1.0f - unit(r.x, 24);  // (0, 1]: log is finite
  const float u2 = unit(r.y, 24);
  const float z = sqrt(-2.0f * log(u1)) * cos(2.0f * M_PI_F * u2);
  out[element_offset(i, p.sizes, p.strides, p.dims)] = T(p.a + p.b * z);
}

template <typename T>
kernel void random_exponential(device T* out [[buffer(0)]], constant RandomParams& p [[buffer(1)]],
                               uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  const uint4 r = philox(p.seed, p.offset + i);
  const float u = unit(r.x, 24);
  out[element_offset(i, p.sizes, p.strides, p.dims)] = T(-log(1.0f - u) / p.a);
}

template <typename T>
kernel void random_int(device T* out [[buffer(0)]], constant RandomParams& p [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  const uint4 r = philox(p.seed, p.offset + i);
  const ulong value = p.range >= (1ul << 32) ? ((ulong(r.y) << 32) | ulong(r.x)) % p.range
                                             : ulong(r.x) % p.range;
  out[element_offset(i, p.sizes, p.strides, p.dims)] = T(long(ulong(p.low) + value));
}

template <typename T, typename P>
kernel void random_bernoulli(device T* out [[buffer(0)]], device const P* probabilities [[buffer(1)]],
                             constant RandomParams& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i >= p.numel) return;
  const uint4 r = philox(p.seed, p.offset + i);
  const float probability = p.has_p_tensor ? float(probabilities[element_offset(i, p.sizes, p.p_strides, p.dims)]) : p.a;
  out[element_offset(i, p.sizes, p.strides, p.dims)] = T(unit(r.x, 24) < probability ? 1 : 0);
}

#define FLOAT_RANDOM_KERNELS(T, NAME)                                                                 \
  template [[host_name("random_uniform_" #NAME)]] [[kernel]] decltype(random_uniform<T>) random_uniform<T>; \
  template [[host_name("random_normal_" #NAME)]] [[kernel]] decltype(random_normal<T>) random_normal<T>;    \
  template [[host_name("random_exponential_" #NAME)]] [[kernel]]                                     \
  decltype(random_exponential<T>) random_exponential<T>;

FLOAT_RANDOM_KERNELS(float, float32)
FLOAT_RANDOM_KERNELS(half, float16)
FLOAT_RANDOM_KERNELS(bfloat, bfloat16)

#define INT_RANDOM_KERNEL(T, NAME) \
  template [[host_name("random_int_" #NAME)]] [[kernel]] decltype(random_int<T>) random_int<T>;

INT_RANDOM_KERNEL(long, int64)
INT_RANDOM_KERNEL(int, int32)
INT_RANDOM_KERNEL(short, int16)
INT_RANDOM_KERNEL(char, int8)
INT_RANDOM_KERNEL(uchar, uint8)
INT_RANDOM_KERNEL(bool, bool)
INT_RANDOM_KERNEL(float, float32)
INT_RANDOM_KERNEL(half, float16)
INT_RANDOM_KERNEL(bfloat, bfloat16)

#define BERNOULLI_KERNEL(T, NAME, P, P_NAME)                          \
  template [[host_name("random_bernoulli_" #NAME "_" #P_NAME)]] [[kernel]] \
  decltype(random_bernoulli<T, P>) random_bernoulli<T, P>;

#define BERNOULLI_KERNELS(T, NAME)                 \
  BERNOULLI_KERNEL(T, NAME, float, float32)        \
  BERNOULLI_KERNEL(T, NAME, half, float16)         \
  BERNOULLI_KERNEL(T, NAME, bfloat, bfloat16)

BERNOULLI_KERNELS(float, float32)
BERNOULLI_KERNELS(half, float16)
BERNOULLI_KERNELS(bfloat, bfloat16)
BERNOULLI_KERNELS(long, int64)
BERNOULLI_KERNELS(int, int32)
BERNOULLI_KERNELS(uchar, uint8)
BERNOULLI_KERNELS(bool, bool)
