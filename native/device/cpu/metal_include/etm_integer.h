// metal_integer: integer functions for char, uchar, short, ushort, int, uint, long and ulong
// scalars and vectors.
#pragma once

#include "etm_functions.h"

namespace etm_msl {

template <class T> constexpr int bit_width_v = int(sizeof(T) * 8);
template <class T> using unsigned_of_t = std::make_unsigned_t<T>;

template <class T> constexpr T saturate_cast_from_wide(__int128 value) {
  const __int128 lo = __int128(std::numeric_limits<T>::min());
  const __int128 hi = __int128(std::numeric_limits<T>::max());
  return T(value < lo ? lo : value > hi ? hi : value);
}

template <class T> constexpr T multiply_high(T x, T y) {
  using wide = std::conditional_t<std::is_signed<T>::value, __int128, unsigned __int128>;
  return T((wide(x) * wide(y)) >> bit_width_v<T>);
}

// The low 24 bits of an int, sign-extended, or of a uint.
template <class T> constexpr T low_24_bits(T x) {
  if constexpr (std::is_signed<T>::value) {
    return T(int32_t(uint32_t(x) << 8) >> 8);
  } else {
    return T(x & 0xffffffu);
  }
}

}  // namespace etm_msl

#define ETM_INTEGER_TEMPLATE template <class T, std::enable_if_t<etm_msl::is_integer_scalar_v<T>, int> = 0>
// Vector form of an integer function: every argument vector-like with an integer element, or a
// scalar that is broadcast.
#define ETM_INTEGER_VECTOR_1(name)                                                            \
  template <class V, std::enable_if_t<etm_msl::is_integer_vector_like_v<V>, int> = 0>        \
  constexpr etm_msl::plain_vector_t<V> name(const V& x) {                                     \
    return etm_msl::map_components([](auto c) { return name(c); }, x);                        \
  }
#define ETM_INTEGER_VECTOR_2(name)                                                            \
  template <class A, class B, std::enable_if_t<etm_msl::are_integer_vector_arguments_v<A, B>, int> = 0> \
  constexpr etm_msl::common_vector_t<A, B> name(const A& x, const B& y) {                     \
    return etm_msl::map_components([](auto a, auto b) { return name(a, b); }, x, y);          \
  }
#define ETM_INTEGER_VECTOR_3(name)                                                            \
  template <class A, class B, class C,                                                        \
            std::enable_if_t<etm_msl::are_integer_vector_arguments_v<A, B, C>, int> = 0>      \
  constexpr etm_msl::common_vector_t<A, B, C> name(const A& x, const B& y, const C& z) {      \
    return etm_msl::map_components([](auto a, auto b, auto c) { return name(a, b, c); }, x, y, z); \
  }

namespace metal {

ETM_INTEGER_TEMPLATE constexpr T abs(T x) {
  if constexpr (std::is_signed<T>::value) {
    using U = etm_msl::unsigned_of_t<T>;
    return T(x < 0 ? U(0) - U(x) : U(x));
  } else {
    return x;
  }
}
ETM_INTEGER_VECTOR_1(abs)

// |x - y| without overflow, in x's type (for signed types, the bits of the unsigned distance).
ETM_INTEGER_TEMPLATE constexpr T absdiff(T x, T y) {
  using U = etm_msl::unsigned_of_t<T>;
  return T(x > y ? U(U(x) - U(y)) : U(U(y) - U(x)));
}
ETM_INTEGER_VECTOR_2(absdiff)

ETM_INTEGER_TEMPLATE constexpr T addsat(T x, T y) {
  T sum{};
  if (!__builtin_add_overflow(x, y, &sum)) return sum;
  if constexpr (std::is_signed<T>::value) {
    return y > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
  } else {
    return std::numeric_limits<T>::max();
  }
}
ETM_INTEGER_VECTOR_2(addsat)

ETM_INTEGER_TEMPLATE constexpr T subsat(T x, T y) {
  T difference{};
  if (!__builtin_sub_overflow(x, y, &difference)) return difference;
  if constexpr (std::is_signed<T>::value) {
    return y < 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
  } else {
    return T(0);
  }
}
ETM_INTEGER_VECTOR_2(subsat)

ETM_INTEGER_TEMPLATE constexpr T min(T x, T y) { return y < x ? y : x; }
ETM_INTEGER_VECTOR_2(min)
ETM_INTEGER_TEMPLATE constexpr T max(T x, T y) { return x < y ? y : x; }
ETM_INTEGER_VECTOR_2(max)
// Apple's compiler takes bool as an integer here (MLX's Maximum/Minimum of bool arrays).
constexpr bool min(bool x, bool y) { return x && y; }
constexpr bool max(bool x, bool y) { return x || y; }
ETM_INTEGER_TEMPLATE constexpr T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
ETM_INTEGER_VECTOR_3(clamp)
ETM_INTEGER_TEMPLATE constexpr T min3(T x, T y, T z) { return min(min(x, y), z); }
ETM_INTEGER_VECTOR_3(min3)
ETM_INTEGER_TEMPLATE constexpr T max3(T x, T y, T z) { return max(max(x, y), z); }
ETM_INTEGER_VECTOR_3(max3)
ETM_INTEGER_TEMPLATE constexpr T median3(T x, T y, T z) { return max(min(x, y), min(max(x, y), z)); }
ETM_INTEGER_VECTOR_3(median3)

ETM_INTEGER_TEMPLATE constexpr T clz(T x) {
  using U = etm_msl::unsigned_of_t<T>;
  const unsigned long long bits = (unsigned long long)U(x);
  return T(bits == 0 ? etm_msl::bit_width_v<T> : __builtin_clzll(bits) - (64 - etm_msl::bit_width_v<T>));
}
ETM_INTEGER_VECTOR_1(clz)
ETM_INTEGER_TEMPLATE constexpr T ctz(T x) {
  using U = etm_msl::unsigned_of_t<T>;
  const unsigned long long bits = (unsigned long long)U(x);
  return T(bits == 0 ? etm_msl::bit_width_v<T> : __builtin_ctzll(bits));
}
ETM_INTEGER_VECTOR_1(ctz)
ETM_INTEGER_TEMPLATE constexpr T popcount(T x) {
  using U = etm_msl::unsigned_of_t<T>;
  return T(__builtin_popcountll((unsigned long long)U(x)));
}
ETM_INTEGER_VECTOR_1(popcount)

ETM_INTEGER_TEMPLATE constexpr T reverse_bits(T x) {
  using U = etm_msl::unsigned_of_t<T>;
  U value = U(x), reversed = 0;
  for (int i = 0; i < etm_msl::bit_width_v<T>; ++i) {
    reversed = U((reversed << 1) | (value & 1u));
    value = U(value >> 1);
  }
  return T(reversed);
}
ETM_INTEGER_VECTOR_1(reverse_bits)

// Rotates x left by y bits (modulo the width).
ETM_INTEGER_TEMPLATE constexpr T rotate(T x, T y) {
  using U = etm_msl::unsigned_of_t<T>;
  constexpr int width = etm_msl::bit_width_v<T>;
  const int shift = int(U(y) % U(width));
  const U value = U(x);
  return T(shift == 0 ? value : U((value << shift) | (value >> (width - shift))));
}
ETM_INTEGER_VECTOR_2(rotate)

// (x + y) >> 1 and (x + y + 1) >> 1 without overflow.
ETM_INTEGER_TEMPLATE constexpr T hadd(T x, T y) { return T((x >> 1) + (y >> 1) + (x & y & 1)); }
ETM_INTEGER_VECTOR_2(hadd)
ETM_INTEGER_TEMPLATE constexpr T rhadd(T x, T y) { return T((x >> 1) + (y >> 1) + ((x | y) & 1)); }
ETM_INTEGER_VECTOR_2(rhadd)

ETM_INTEGER_TEMPLATE constexpr T mulhi(T x, T y) { return etm_msl::multiply_high(x, y); }
ETM_INTEGER_VECTOR_2(mulhi)
ETM_INTEGER_TEMPLATE constexpr T madhi(T x, T y, T z) { return T(etm_msl::multiply_high(x, y) + z); }
ETM_INTEGER_VECTOR_3(madhi)
ETM_INTEGER_TEMPLATE constexpr T madsat(T x, T y, T z) {
  if constexpr (etm_msl::bit_width_v<T> < 64) {
    return etm_msl::saturate_cast_from_wide<T>(__int128(x) * __int128(y) + __int128(z));
  } else if constexpr (std::is_signed<T>::value) {
    __int128 exact = __int128(x) * __int128(y);
    if (exact > __int128(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (exact < __int128(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    return addsat(T(exact), z);
  } else {
    unsigned __int128 exact = (unsigned __int128)x * y + z;
    return exact > std::numeric_limits<T>::max() ? std::numeric_limits<T>::max() : T(exact);
  }
}
ETM_INTEGER_VECTOR_3(madsat)

// 24-bit multiplies: defined for int and uint.
template <class T, std::enable_if_t<std::is_same<T, int>::value || std::is_same<T, uint>::value, int> = 0>
constexpr T mul24(T x, T y) {
  return T(uint32_t(etm_msl::low_24_bits(x)) * uint32_t(etm_msl::low_24_bits(y)));
}
ETM_INTEGER_VECTOR_2(mul24)
template <class T, std::enable_if_t<std::is_same<T, int>::value || std::is_same<T, uint>::value, int> = 0>
constexpr T mad24(T x, T y, T z) {
  return T(uint32_t(mul24(x, y)) + uint32_t(z));
}
ETM_INTEGER_VECTOR_3(mad24)

// extract_bits(x, offset, bits): the field [offset, offset + bits), sign-extended for signed T.
template <class T, class O, class B, std::enable_if_t<etm_msl::is_integer_scalar_v<T>, int> = 0>
constexpr T extract_bits(T x, O offset, B bits) {
  using U = etm_msl::unsigned_of_t<T>;
  constexpr int width = etm_msl::bit_width_v<T>;
  const int count = int(bits), start = int(offset);
  if (count <= 0) return T(0);
  const U field = U(U(x) << (width - count - start));
  if constexpr (std::is_signed<T>::value) {
    return T(T(field) >> (width - count));
  } else {
    return T(field >> (width - count));
  }
}
template <class V, class O, class B, std::enable_if_t<etm_msl::is_integer_vector_like_v<V>, int> = 0>
constexpr etm_msl::plain_vector_t<V> extract_bits(const V& x, O offset, B bits) {
  return etm_msl::map_components([offset, bits](auto c) { return extract_bits(c, offset, bits); }, x);
}

// insert_bits(base, insert, offset, bits): base with [offset, offset + bits) replaced by the low
// bits of insert.
template <class T, class O, class B, std::enable_if_t<etm_msl::is_integer_scalar_v<T>, int> = 0>
constexpr T insert_bits(T base, T insert, O offset, B bits) {
  using U = etm_msl::unsigned_of_t<T>;
  constexpr int width = etm_msl::bit_width_v<T>;
  const int count = int(bits), start = int(offset);
  if (count <= 0) return base;
  const U mask = U((count >= width ? U(~U(0)) : U((U(1) << count) - 1u)) << start);
  return T((U(base) & U(~mask)) | (U(U(insert) << start) & mask));
}
template <class V, class W, class O, class B,
          std::enable_if_t<etm_msl::are_integer_vector_arguments_v<V, W>, int> = 0>
constexpr etm_msl::common_vector_t<V, W> insert_bits(const V& base, const W& insert, O offset, B bits) {
  return etm_msl::map_components([offset, bits](auto b, auto i) { return insert_bits(b, i, offset, bits); },
                                 base, insert);
}

}  // namespace metal

#undef ETM_INTEGER_TEMPLATE
#undef ETM_INTEGER_VECTOR_1
#undef ETM_INTEGER_VECTOR_2
#undef ETM_INTEGER_VECTOR_3
