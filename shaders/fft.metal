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
// That is the CPU launch shape. On the GPU launch shape the transforms run in threadgroup memory
// (fft_group_*, below): a line of up to 4096 elements in one dispatch from source to destination
// (other lengths as chirp-z convolutions of m <= 4096), longer power-of-two parts as one
// fft_group_stage dispatch per up to 4096 (four-step), the other factors as passes.
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

// exp(sign 2 pi i exponent / period) for exponent < period: an exact phase in float32.
inline float2 root_of_unity(uint exponent, uint period, float sign) {
  const float turns = 2.0f * float(exponent) / float(period);
  return float2(precise::cospi(turns), sign * precise::sinpi(turns));
}

// The radix-point DFT (radix 2, 4 or 16) of t[0 .. radix) in place (output r at output_slot(r)).
// The 16-point transform is 4 x 4: 4-point transforms over q = q0 + 4 q1 along q1, the roots
// exp(sign 2 pi i q0 r0 / 16), then 4-point transforms along q0 give r = r0 + 4 r1.
inline void transform_in_registers(thread float2* t, uint radix, float sign) {
  if (radix == 2) {
    const float2 first = t[0];
    t[0] = first + t[1];
    t[1] = first - t[1];
    return;
  }
  if (radix == 4) {
    transform4(t[0], t[1], t[2], t[3], sign);
    return;
  }
  for (uint q0 = 0; q0 < 4; ++q0) transform4(t[q0], t[q0 + 4], t[q0 + 8], t[q0 + 12], sign);  // t[q0 + 4 r0]
  // cos and sin of pi e / 8 for e = q0 r0 <= 9 (float32 roundings of the exact values).
  const float cosines[10] = {1.0f, 0.9238795325f, 0.7071067812f, 0.3826834324f, 0.0f,
                             -0.3826834324f, -0.7071067812f, -0.9238795325f, -1.0f, -0.9238795325f};
  const float sines[10] = {0.0f, 0.3826834324f, 0.7071067812f, 0.9238795325f, 1.0f,
                           0.9238795325f, 0.7071067812f, 0.3826834324f, 0.0f, -0.3826834324f};
  for (uint q0 = 1; q0 < 4; ++q0) {
    for (uint r0 = 1; r0 < 4; ++r0) {
      const uint e = q0 * r0;
      t[q0 + 4 * r0] = complex_multiply(t[q0 + 4 * r0], float2(cosines[e], sign * sines[e]));
    }
  }
  for (uint r0 = 0; r0 < 4; ++r0) {
    transform4(t[4 * r0], t[4 * r0 + 1], t[4 * r0 + 2], t[4 * r0 + 3], sign);  // t[4 r0 + r1]: r = r0 + 4 r1
  }
}

// Where transform_in_registers leaves output r: in place for radix 2 and 4, at 4 r0 + r1 for
// r = r0 + 4 r1 for radix 16.
inline uint output_slot(uint r, uint radix) { return radix == 16 ? 4 * (r % 4) + r / 4 : r; }

// fft_pass's stage for p = Radix (2, 4 or 16), a thread per butterfly: for k < L and j' < m,
// the inputs Y[j' + m q, k] times w^(q k), through a Radix-point transform, give
// Y'[j', k + L r] for every r (w^(q L r) = exp(sign 2 pi i q r / Radix)).
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
  for (uint q = 1; q < Radix; ++q) t[q] = complex_multiply(line[base + q * m], root_of_unity(q * k, combined, p.sign));
  transform_in_registers(t, Radix, p.sign);
  device float2* out = output + ulong(position.y) * p.length + k * m + j;
  const uint step = p.span * m;  // from r to r + 1
  for (uint r = 0; r < Radix; ++r) out[r * step] = t[output_slot(r, Radix)];
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
inline float2 chirp(uint k, uint n, float sign) {
  const ulong period = 2ul * n;
  long residue = long((ulong(k) * k) % period);
  if (residue > long(n)) residue -= long(period);
  const float turns = float(residue) / float(n);
  return float2(precise::cospi(turns), sign * precise::sinpi(turns));
}

// The convolution's filter, one line of m: conj(c_t) at t and at m - t for t < n, 0 between.
kernel void fft_chirp_filter(device float2* filter [[buffer(0)]], constant FftChirp& p [[buffer(1)]],
                             uint t [[thread_position_in_grid]]) {
  const uint distance = min(t, p.padded - t);
  if (distance >= p.length) {
    filter[t] = float2(0.0f);
    return;
  }
  const float2 c = chirp(distance, p.length, p.sign);
  filter[t] = float2(c.x, -c.y);
}

// Line after line of n elements (work) -> line after line of m: x_t c_t, zero from n on.
kernel void fft_chirp_spread(const device float2* work [[buffer(0)]], device float2* padded [[buffer(1)]],
                             constant FftChirp& p [[buffer(2)]], uint2 position [[thread_position_in_grid]]) {
  const uint t = position.x;
  const float2 value = t < p.length ? complex_multiply(work[ulong(position.y) * p.length + t], chirp(t, p.length, p.sign))
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
  const float2 value = complex_multiply(padded[ulong(position.y) * p.padded + k], chirp(k, p.length, p.sign));
  work[ulong(position.y) * p.length + k] = value * p.scale;
}

// Transforms in threadgroup memory (fft_group_*): a threadgroup holds `columns` transforms of a
// power-of-two `radix` R <= kFftGroupElements, loads them from device memory once, runs all their
// radix-16 / 4 / 2 Stockham passes in threadgroup memory (every thread owns 16 elements of a pass,
// or R below 16: its butterflies' inputs go into registers, a barrier, the outputs back) and
// stores them once. What the columns are, by Ends:
//   kFftEndsWork: a Stockham stage of radix R over work buffers (span L -> L R, as fft_butterfly
//     with R for Radix): column (k, j') reads Y[j' + m q, k] w^(q k) and writes Y'[j', k + L r].
//     A length beyond kFftGroupElements takes two or more such stages (four-step).
//   kFftEndsReal / Complex / Hermitian: whole lines, read from the source and written to the
//     destination as fft_load_* / fft_store_* do: one device read and write per element. With
//     chirp set (a length-n line, R = m >= 2n - 1), the line is the chirp-z transform's
//     convolution: x_t c_t, forward passes, times the filter's spectrum, inverse passes, c_k / m.
// The element (column c, index q) of a load or store is e = thread + i * threads: q fastest for
// whole lines (consecutive addresses along a line) and c fastest for stages with m > 1
// (consecutive columns are consecutive j').
struct GroupElement {
  uint column;
  uint index;
};

inline GroupElement group_element(uint e, uint radix, uint columns, bool columns_fastest) {
  if (columns_fastest) return {e % columns, e / columns};
  return {e / radix, e % radix};
}

inline float2 as_complex(float value) { return float2(value, 0.0f); }
inline float2 as_complex(float2 value) { return value; }
inline void store_value(device float* at, float2 value) { *at = value.x; }
inline void store_value(device float2* at, float2 value) { *at = value; }

// Where column `column` of a stage (kFftEndsWork) reads index q and writes index r in its line
// of the buffers (n = g.length each): k m R + j' + q m and (k + L r) m + j'.
struct StageColumn {
  ulong line;
  uint input;
  uint output;
  uint k;
  uint m;
};

inline StageColumn stage_column(constant FftGroup& g, uint column) {
  const uint per_line = g.length / g.radix;
  const uint butterfly = column % per_line;
  const uint m = per_line / g.span;
  const uint k = butterfly / m;
  const uint j = butterfly % m;
  return {column / per_line, k * m * g.radix + j, k * m + j, k, m};
}

// A stage's element at `position` of its line, with the chirp-z steps its flags fold in: the
// filter itself (conj(c_t) at t and m - t for t < n), the spread (x_t c_t from lines of n, zero
// from n on), or the product with the filter's spectrum.
template <typename Source>
inline float2 stage_input(const device Source* source, const device float2* filter, constant FftGroup& g,
                          ulong line, uint position) {
  if (g.chirp & kFftChirpMakeFilter) {
    const uint distance = min(position, g.length - position);
    if (distance >= g.chirp_length) return float2(0.0f);
    const float2 c = chirp(distance, g.chirp_length, g.sign);
    return float2(c.x, -c.y);
  }
  if (g.chirp & kFftChirpSpread) {
    if (position >= g.chirp_length) return float2(0.0f);
    return complex_multiply(as_complex(source[line * g.chirp_length + position]), chirp(position, g.chirp_length, g.sign));
  }
  const float2 value = as_complex(source[line * g.length + position]);
  return g.chirp & kFftChirpFilter ? complex_multiply(value, filter[position]) : value;
}

// The passes of a power-of-two R = 2^(4 s + r), r < 4, in threadgroup memory: s of radix 16,
// then one of 4 when r >= 2, then one of 2 when r is odd.
struct GroupPasses {
  uint sixteens;
  uint rest_bits;
  uint count;
  uint span_bits(uint pass) const { return 4 * min(pass, sixteens) + (pass > sixteens && rest_bits >= 2 ? 2 : 0); }
  uint radix_bits(uint pass) const { return pass < sixteens ? 4 : pass == sixteens && rest_bits >= 2 ? 2 : 1; }
};

inline GroupPasses group_passes(uint radix) {
  const uint bits = ctz(radix);
  const uint rest_bits = bits % 4;
  return {bits / 4, rest_bits, bits / 4 + rest_bits / 2 + rest_bits % 2};
}

template <typename Source, typename Destination, uint Ends>
kernel void fft_group(const device Source* source [[buffer(0)]], device Destination* destination [[buffer(1)]],
                      const device float2* filter [[buffer(2)]], constant FftLines& lines [[buffer(3)]],
                      constant FftGroup& g [[buffer(4)]], uint group [[threadgroup_position_in_grid]],
                      uint thread_index [[thread_index_in_threadgroup]],
                      uint threads [[threads_per_threadgroup]]) {
  threadgroup float2 data[kFftGroupElements];
  const uint radix = g.radix;
  const uint elements = g.columns * radix;
  const bool stage = Ends == kFftEndsWork;
  const bool columns_fastest = stage && g.length / (g.span * radix) > 1;
  for (uint e = thread_index; e < elements; e += threads) {
    const GroupElement at = group_element(e, radix, g.columns, columns_fastest);
    const uint column = group * g.columns + at.column;
    float2 value = float2(0.0f);
    if (column < g.column_count && stage) {
      const StageColumn c = stage_column(g, column);
      value = stage_input(source, filter, g, c.line, c.input + at.index * c.m);
      if (at.index > 0) value = complex_multiply(value, root_of_unity(at.index * c.k, g.span * radix, g.sign));
    } else if (column < g.column_count && at.index < lines.length) {
      const long line = line_offsets(lines, column).source;
      const bool mirrored = Ends == kFftEndsHermitian && at.index > lines.length / 2;
      value = as_complex(source[line + long(mirrored ? lines.length - at.index : at.index) * lines.source_stride]);
      if (mirrored) value.y = -value.y;
      if (g.chirp & kFftChirpLine) value = complex_multiply(value, chirp(at.index, lines.length, g.sign));
    }
    data[at.column * radix + at.index] = value;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint per_thread = min(radix, 16u);
  const GroupPasses passes = group_passes(radix);
  const bool convolution = !stage && (g.chirp & kFftChirpLine);
  for (uint round = 0; round < (convolution ? 2u : 1u); ++round) {
    const float sign = round == 0 ? g.sign : -g.sign;
    for (uint pass = 0; pass < passes.count; ++pass) {
      const uint span = 1u << passes.span_bits(pass);
      const uint pass_radix = 1u << passes.radix_bits(pass);
      const uint per_column = radix / pass_radix;  // butterflies
      const uint m = radix / (span * pass_radix);
      float2 t[16];
      for (uint i = 0; i < per_thread / pass_radix; ++i) {
        const uint butterfly = thread_index + i * threads;
        const uint b = butterfly % per_column;
        const uint base = (butterfly / per_column) * radix + (b / m) * m * pass_radix + b % m;
        thread float2* own = t + i * pass_radix;
        own[0] = data[base];
        for (uint q = 1; q < pass_radix; ++q) {
          own[q] = complex_multiply(data[base + q * m], root_of_unity(q * (b / m), span * pass_radix, sign));
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (uint i = 0; i < per_thread / pass_radix; ++i) {
        const uint butterfly = thread_index + i * threads;
        const uint b = butterfly % per_column;
        const uint base = (butterfly / per_column) * radix + (b / m) * m + b % m;
        thread float2* own = t + i * pass_radix;
        transform_in_registers(own, pass_radix, sign);
        for (uint r = 0; r < pass_radix; ++r) data[base + r * span * m] = own[output_slot(r, pass_radix)];
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (convolution && round == 0) {
      for (uint e = thread_index; e < elements; e += threads) data[e] = complex_multiply(data[e], filter[e % radix]);
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  for (uint e = thread_index; e < elements; e += threads) {
    const GroupElement at = group_element(e, radix, g.columns, stage);
    const uint column = group * g.columns + at.column;
    const float2 value = data[at.column * radix + at.index];
    if (column < g.column_count && stage) {
      const StageColumn c = stage_column(g, column);
      const uint position = c.output + at.index * g.span * c.m;
      if (!(g.chirp & kFftChirpGather)) {
        store_value(destination + c.line * g.length + position, value);
      } else if (position < g.chirp_length) {  // the convolution's first n, times c_k / m
        const float2 gathered = complex_multiply(value, chirp(position, g.chirp_length, -g.sign)) * g.chirp_scale;
        store_value(destination + c.line * g.chirp_length + position, gathered);
      }
    } else if (column < g.column_count && at.index < g.output_length) {
      const long line = line_offsets(lines, column).destination;
      const float2 scaled = convolution ? complex_multiply(value, chirp(at.index, lines.length, g.sign)) * g.chirp_scale
                                    : value;
      store_value(destination + line + long(at.index) * lines.destination_stride, scaled * lines.scale);
    }
  }
}

template [[host_name("fft_group_stage")]] kernel void fft_group<float2, float2, kFftEndsWork>(
    const device float2*, device float2*, const device float2*, constant FftLines&, constant FftGroup&, uint, uint,
    uint);
template [[host_name("fft_group_r2c")]] kernel void fft_group<float, float2, kFftEndsReal>(
    const device float*, device float2*, const device float2*, constant FftLines&, constant FftGroup&, uint, uint,
    uint);
template [[host_name("fft_group_c2c")]] kernel void fft_group<float2, float2, kFftEndsComplex>(
    const device float2*, device float2*, const device float2*, constant FftLines&, constant FftGroup&, uint, uint,
    uint);
template [[host_name("fft_group_c2r")]] kernel void fft_group<float2, float, kFftEndsHermitian>(
    const device float2*, device float*, const device float2*, constant FftLines&, constant FftGroup&, uint, uint,
    uint);
