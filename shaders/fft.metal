// Discrete Fourier transforms along one dimension (the steps of ATen's _fft_r2c, _fft_c2c and
// _fft_c2r), in float32. A transform of length n over every line (the elements along the
// transformed dimension) takes:
//   fft_load_*   one thread per (element, line): the line into a contiguous complex work buffer
//                (real input as (x, 0); a one-sided Hermitian spectrum extended to n elements).
//   a pass     once per factor p of n (Stockham autosort, decimation in time): combines p
//                sub-transforms of length L into one of length L * p, reading one work buffer
//                and writing the other. fft_butterfly_2 / _4 / _16 (p = 2, 4, 16): one
//                thread per (butterfly, line), p - 1 twiddles and a p-point transform in
//                registers. fft_pass (any other p, so any n works): one thread per
//                (element, line) summing p terms; a large prime factor p costs n * p
//                operations per line, so such lengths go through a chirp-z transform instead
//                (fft_chirp_*, below).
//   fft_store_*  one thread per (element, line): the first elements of each line, scaled, into
//                the destination (complex, or the real part).
// Twiddle factors come from precise::cospi / sinpi of an exact integer phase (q * k mod L') / L'.
#include <metal_stdlib>
using namespace metal;

#include "params/fft.h"

inline float2 complex_multiply(float2 a, float2 b) {
  return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

struct LineOffsets {
  long source;
  long destination;
};

inline LineOffsets line_offsets(constant FftLines& p, uint line) {
  LineOffsets at = {0, 0};
  for (int d = int(p.outer_dims) - 1; d >= 0; --d) {
    const uint coordinate = line % p.outer_sizes[d];
    line /= p.outer_sizes[d];
    at.source += long(coordinate) * p.source_outer[d];
    at.destination += long(coordinate) * p.destination_outer[d];
  }
  return at;
}

kernel void fft_load_real(const device float* source [[buffer(0)]], device float2* work [[buffer(1)]],
                          constant FftLines& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const long at = line_offsets(p, position.y).source + long(position.x) * p.source_stride;
  work[ulong(position.y) * p.length + position.x] = float2(source[at], 0.0f);
}

kernel void fft_load_complex(const device float2* source [[buffer(0)]], device float2* work [[buffer(1)]],
                             constant FftLines& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const long at = line_offsets(p, position.y).source + long(position.x) * p.source_stride;
  work[ulong(position.y) * p.length + position.x] = source[at];
}

// Element k of the full spectrum of a real signal from its first n / 2 + 1 elements:
// X[k] = conj(X[n - k]) above n / 2.
kernel void fft_load_hermitian(const device float2* source [[buffer(0)]], device float2* work [[buffer(1)]],
                               constant FftLines& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const long line = line_offsets(p, position.y).source;
  const uint k = position.x;
  const bool mirrored = k > p.length / 2;
  const float2 value = source[line + long(mirrored ? p.length - k : k) * p.source_stride];
  work[ulong(position.y) * p.length + k] = mirrored ? float2(value.x, -value.y) : value;
}

// Stage (L -> L' = L * p) of the Stockham transform. Before it, sub-transform j (of the
// subsequence x[j + (n / L) t]) holds frequency k at index k * (n / L) + j; after it, with
// m = n / L', Y'[j', k + L r] = sum_q Y[j' + m q, k] * w^(q (k + L r)), w = exp(sign 2 pi i / L').
kernel void fft_pass(const device float2* input [[buffer(0)]], device float2* output [[buffer(1)]],
                     constant FftPass& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const uint combined = p.span * p.radix;  // L'
  const uint m = p.length / combined;
  const uint frequency = position.x / m;   // k + L r
  const uint j = position.x % m;
  const uint k = frequency % p.span;
  const device float2* line = input + ulong(position.y) * p.length;
  const uint base = k * (m * p.radix) + j;
  float2 sum = float2(0.0f);
  uint phase = 0;  // q * frequency mod L'
  for (uint q = 0; q < p.radix; ++q) {
    const float2 value = line[base + q * m];
    const float turns = 2.0f * float(phase) / float(combined);
    const float c = precise::cospi(turns);
    const float s = p.sign * precise::sinpi(turns);
    sum += float2(value.x * c - value.y * s, value.x * s + value.y * c);
    phase += frequency;
    if (phase >= combined) phase -= combined;
  }
  output[ulong(position.y) * p.length + position.x] = sum;
}

// The 4-point transform of (a, b, c, d) in place: roots +-1 and sign * i.
inline void transform4(thread float2& a, thread float2& b, thread float2& c, thread float2& d, float sign) {
  const float2 even_sum = a + c;
  const float2 even_difference = a - c;
  const float2 odd_sum = b + d;
  const float2 odd_difference = b - d;
  const float2 rotated = sign * float2(-odd_difference.y, odd_difference.x);
  a = even_sum + odd_sum;
  b = even_difference + rotated;
  c = even_sum - odd_sum;
  d = even_difference - rotated;
}

// fft_pass's stage for p = Radix (2, 4 or 16), a thread per butterfly: for k < L and j' < m,
// the inputs Y[j' + m q, k] times w^(q k), through a Radix-point transform, give
// Y'[j', k + L r] for every r (w^(q L r) = exp(sign 2 pi i q r / Radix)). The 16-point
// transform is 4 x 4: 4-point transforms over q = q0 + 4 q1 along q1, the roots
// exp(sign 2 pi i q0 r0 / 16), then 4-point transforms along q0 give r = r0 + 4 r1.
template <uint Radix>
kernel void fft_butterfly(const device float2* input [[buffer(0)]], device float2* output [[buffer(1)]],
                          constant FftPass& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const uint combined = p.span * Radix;  // L'
  const uint m = p.length / combined;
  const uint k = position.x / m;
  const uint j = position.x % m;
  const device float2* line = input + ulong(position.y) * p.length;
  const uint base = k * (m * Radix) + j;
  float2 t[Radix];
  t[0] = line[base];
  for (uint q = 1; q < Radix; ++q) {
    const float turns = 2.0f * float(q * k) / float(combined);  // q k < L'
    t[q] = complex_multiply(line[base + q * m], float2(precise::cospi(turns), p.sign * precise::sinpi(turns)));
  }
  device float2* out = output + ulong(position.y) * p.length + k * m + j;
  const uint step = p.span * m;  // from r to r + 1
  if (Radix == 2) {
    out[0] = t[0] + t[1];
    out[step] = t[0] - t[1];
    return;
  }
  if (Radix == 4) {
    transform4(t[0], t[1], t[2], t[3], p.sign);
    for (uint r = 0; r < 4; ++r) out[r * step] = t[r];
    return;
  }
  for (uint q0 = 0; q0 < 4; ++q0) transform4(t[q0], t[q0 + 4], t[q0 + 8], t[q0 + 12], p.sign);  // t[q0 + 4 r0]
  // cos and sin of pi e / 8 for e = q0 r0 <= 9 (float32 roundings of the exact values).
  const float cosines[10] = {1.0f, 0.9238795325f, 0.7071067812f, 0.3826834324f, 0.0f,
                             -0.3826834324f, -0.7071067812f, -0.9238795325f, -1.0f, -0.9238795325f};
  const float sines[10] = {0.0f, 0.3826834324f, 0.7071067812f, 0.9238795325f, 1.0f,
                           0.9238795325f, 0.7071067812f, 0.3826834324f, 0.0f, -0.3826834324f};
  for (uint q0 = 1; q0 < 4; ++q0) {
    for (uint r0 = 1; r0 < 4; ++r0) {
      const uint e = q0 * r0;
      t[q0 + 4 * r0] = complex_multiply(t[q0 + 4 * r0], float2(cosines[e], p.sign * sines[e]));
    }
  }
  for (uint r0 = 0; r0 < 4; ++r0) {
    transform4(t[4 * r0], t[4 * r0 + 1], t[4 * r0 + 2], t[4 * r0 + 3], p.sign);  // t[4 r0 + r1]: r = r0 + 4 r1
    for (uint r1 = 0; r1 < 4; ++r1) out[(r0 + 4 * r1) * step] = t[4 * r0 + r1];
  }
}

template [[host_name("fft_butterfly_2")]] kernel void fft_butterfly<2>(const device float2*, device float2*,
                                                                      constant FftPass&, uint2);
template [[host_name("fft_butterfly_4")]] kernel void fft_butterfly<4>(const device float2*, device float2*,
                                                                      constant FftPass&, uint2);
template [[host_name("fft_butterfly_16")]] kernel void fft_butterfly<16>(const device float2*, device float2*,
                                                                        constant FftPass&, uint2);

kernel void fft_store_complex(const device float2* work [[buffer(0)]], device float2* destination [[buffer(1)]],
                              constant FftLines& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const long at = line_offsets(p, position.y).destination + long(position.x) * p.destination_stride;
  destination[at] = work[ulong(position.y) * p.length + position.x] * p.scale;
}

kernel void fft_store_real(const device float2* work [[buffer(0)]], device float* destination [[buffer(1)]],
                           constant FftLines& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const long at = line_offsets(p, position.y).destination + long(position.x) * p.destination_stride;
  destination[at] = work[ulong(position.y) * p.length + position.x].x * p.scale;
}

// Chirp-z (Bluestein) transform of length n: with 2 j k = j^2 + k^2 - (k - j)^2 and
// c_k = exp(sign i pi k^2 / n), X_k = c_k sum_j (x_j c_j) conj(c_(k - j)): a convolution, done
// circularly at a power-of-two length m >= 2n - 1 by power-of-two passes. The host runs
// fft_chirp_filter and a forward transform of it once, then per line fft_chirp_spread, a forward
// transform, fft_chirp_convolve, an inverse transform and fft_chirp_gather.

// c_k. k^2 is reduced mod 2n in integers (c has period 2n in k^2) and then into (-n, n], so the
// phase keeps float32's precision for any k, where a float k * k would lose it from k ~ 4096.
inline float2 chirp(uint k, constant FftChirp& p) {
  const ulong period = 2ul * p.length;
  long residue = long((ulong(k) * k) % period);
  if (residue > long(p.length)) residue -= long(period);
  const float turns = float(residue) / float(p.length);
  return float2(precise::cospi(turns), p.sign * precise::sinpi(turns));
}

// The convolution's filter, one line of m: conj(c_t) at t and at m - t for t < n, 0 between.
kernel void fft_chirp_filter(device float2* filter [[buffer(0)]], constant FftChirp& p [[buffer(1)]],
                             uint t [[thread_position_in_grid]]) {
  const uint distance = min(t, p.padded - t);
  if (distance >= p.length) {
    filter[t] = float2(0.0f);
    return;
  }
  const float2 c = chirp(distance, p);
  filter[t] = float2(c.x, -c.y);
}

// Line after line of n elements (work) -> line after line of m: x_t c_t, zero from n on.
kernel void fft_chirp_spread(const device float2* work [[buffer(0)]], device float2* padded [[buffer(1)]],
                             constant FftChirp& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const uint t = position.x;
  const float2 value = t < p.length ? complex_multiply(work[ulong(position.y) * p.length + t], chirp(t, p))
                                    : float2(0.0f);
  padded[ulong(position.y) * p.padded + t] = value;
}

// Every line's spectrum times the filter's, in place.
kernel void fft_chirp_convolve(device float2* padded [[buffer(0)]], const device float2* filter [[buffer(1)]],
                               constant FftChirp& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const ulong at = ulong(position.y) * p.padded + position.x;
  padded[at] = complex_multiply(padded[at], filter[position.x]);
}

// The first n elements of each convolved line, times c_k and the scale, back into lines of n.
kernel void fft_chirp_gather(const device float2* padded [[buffer(0)]], device float2* work [[buffer(1)]],
                             constant FftChirp& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const uint k = position.x;
  const float2 value = complex_multiply(padded[ulong(position.y) * p.padded + k], chirp(k, p));
  work[ulong(position.y) * p.length + k] = value * p.scale;
}
