// Metal's `bfloat` (brain float: 1 sign, 8 exponent, 7 mantissa bits) as a literal class type.
// Arithmetic happens in float; results are rounded back to nearest-even, as on Apple GPUs.
// (GCC 12 has no arithmetic __bf16; a class keeps one implementation for every compiler.)
#pragma once

#include "etm_base.h"

namespace etm_msl {

constexpr uint16_t float_to_bfloat_bits(float value) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: keep the sign and the top payload bits, force the quiet bit so that truncation
    // cannot turn it into infinity.
    return uint16_t((bits >> 16) | 0x0040u);
  }
  const uint32_t round_to_nearest_even = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + round_to_nearest_even) >> 16);
}

constexpr float bfloat_bits_to_float(uint16_t bits) {
  return __builtin_bit_cast(float, uint32_t(bits) << 16);
}

template <class S>
constexpr bool is_host_arithmetic_v = std::is_arithmetic<S>::value || is_half<S>::value;

}  // namespace etm_msl

struct bfloat;

namespace etm_msl {
// A class with its own conversion to bfloat (complex_t's `operator U()`) keeps using it.
template <class C, class = void>
struct converts_to_bfloat_itself : std::false_type {};
template <class C>
struct converts_to_bfloat_itself<C, std::void_t<decltype(std::declval<const C&>().operator bfloat())>>
    : std::true_type {};
}  // namespace etm_msl

struct bfloat {
  uint16_t bits;

  bfloat() = default;
  constexpr bfloat(float value) : bits(etm_msl::float_to_bfloat_bits(value)) {}
  template <class S, std::enable_if_t<etm_msl::is_host_arithmetic_v<S> &&
                                          !std::is_same<S, float>::value,
                                      int> = 0>
  constexpr bfloat(S value) : bits(etm_msl::float_to_bfloat_bits(float(value))) {}
  // Metal's bfloat is a built-in type: a class that converts to a scalar (`operator bool()`)
  // converts on to bfloat by a standard conversion, which a class bfloat must do here.
  template <class C, std::enable_if_t<std::is_class<C>::value && !std::is_same<C, bfloat>::value &&
                                          !etm_msl::converts_to_bfloat_itself<C>::value &&
                                          std::is_convertible<const C&, float>::value,
                                      int> = 0>
  constexpr bfloat(const C& value) : bits(etm_msl::float_to_bfloat_bits(float(value))) {}

  static constexpr bfloat from_bits(uint16_t raw) {
    bfloat result{};
    result.bits = raw;
    return result;
  }

  // Implicitly bfloat converts only to float; to other scalars only explicitly. Metal's
  // `cond ? bf : 1` converts the int to bfloat: were bfloat -> int (through float) implicit too,
  // C++ would find conversions both ways and reject the conditional as ambiguous.
  template <class T, std::enable_if_t<std::is_same<T, float>::value, int> = 0>
  constexpr operator T() const {
    return etm_msl::bfloat_bits_to_float(bits);
  }
  template <class T, std::enable_if_t<etm_msl::is_host_arithmetic_v<T> && !std::is_same<T, float>::value,
                                      int> = 0>
  constexpr explicit operator T() const {
    return T(etm_msl::bfloat_bits_to_float(bits));
  }

  constexpr bfloat& operator+=(float rhs) { return *this = bfloat(float(*this) + rhs); }
  constexpr bfloat& operator-=(float rhs) { return *this = bfloat(float(*this) - rhs); }
  constexpr bfloat& operator*=(float rhs) { return *this = bfloat(float(*this) * rhs); }
  constexpr bfloat& operator/=(float rhs) { return *this = bfloat(float(*this) / rhs); }
  constexpr bfloat& operator++() { return *this += 1.0f; }
  constexpr bfloat& operator--() { return *this -= 1.0f; }
  constexpr bfloat operator++(int) {
    bfloat old = *this;
    *this += 1.0f;
    return old;
  }
  constexpr bfloat operator--(int) {
    bfloat old = *this;
    *this -= 1.0f;
    return old;
  }

  friend constexpr bfloat operator-(bfloat value) { return from_bits(uint16_t(value.bits ^ 0x8000u)); }
  friend constexpr bfloat operator+(bfloat value) { return value; }

  // bfloat op bfloat and bfloat op integer give bfloat; with float, half or double the other
  // operand's type wins and the result is float, as Metal's usual arithmetic conversions do.
  template <class S>
  using mixed_result_t =
      std::enable_if_t<etm_msl::is_host_arithmetic_v<S> || std::is_same<S, bfloat>::value,
                       std::conditional_t<std::is_integral<S>::value || std::is_same<S, bfloat>::value,
                                          bfloat, float>>;
#define ETM_BFLOAT_ARITHMETIC(op)                                                     \
  friend constexpr bfloat operator op(bfloat lhs, bfloat rhs) {                      \
    return bfloat(float(lhs) op float(rhs));                                          \
  }                                                                                   \
  template <class S, std::enable_if_t<!std::is_same<S, bfloat>::value, int> = 0>     \
  friend constexpr mixed_result_t<S> operator op(bfloat lhs, S rhs) {                \
    return mixed_result_t<S>(float(lhs) op float(rhs));                               \
  }                                                                                   \
  template <class S, std::enable_if_t<!std::is_same<S, bfloat>::value, int> = 0>     \
  friend constexpr mixed_result_t<S> operator op(S lhs, bfloat rhs) {                \
    return mixed_result_t<S>(float(lhs) op float(rhs));                               \
  }
  ETM_BFLOAT_ARITHMETIC(+)
  ETM_BFLOAT_ARITHMETIC(-)
  ETM_BFLOAT_ARITHMETIC(*)
  ETM_BFLOAT_ARITHMETIC(/)
#undef ETM_BFLOAT_ARITHMETIC

  // The conversion to float is a template, which the built-in comparison candidates do not
  // consider: comparisons are spelled out, in float as Metal compares bfloat.
#define ETM_BFLOAT_COMPARISON(op)                                                     \
  friend constexpr bool operator op(bfloat lhs, bfloat rhs) { return float(lhs) op float(rhs); } \
  template <class S, std::enable_if_t<etm_msl::is_host_arithmetic_v<S>, int> = 0>    \
  friend constexpr bool operator op(bfloat lhs, S rhs) {                             \
    return float(lhs) op float(rhs);                                                  \
  }                                                                                   \
  template <class S, std::enable_if_t<etm_msl::is_host_arithmetic_v<S>, int> = 0>    \
  friend constexpr bool operator op(S lhs, bfloat rhs) {                             \
    return float(lhs) op float(rhs);                                                  \
  }
  ETM_BFLOAT_COMPARISON(==)
  ETM_BFLOAT_COMPARISON(!=)
  ETM_BFLOAT_COMPARISON(<)
  ETM_BFLOAT_COMPARISON(<=)
  ETM_BFLOAT_COMPARISON(>)
  ETM_BFLOAT_COMPARISON(>=)
#undef ETM_BFLOAT_COMPARISON

  // Likewise a built-in scalar compound-assigned a bfloat (`sum += bf`): computed as
  // `sum = sum op bf` would be.
#define ETM_BFLOAT_COMPOUND_ASSIGNMENT(op)                                             \
  template <class S, std::enable_if_t<etm_msl::is_host_arithmetic_v<S>, int> = 0>     \
  friend constexpr S& operator op##=(S& lhs, bfloat rhs) {                            \
    return lhs = S(lhs op rhs);                                                        \
  }
  ETM_BFLOAT_COMPOUND_ASSIGNMENT(+)
  ETM_BFLOAT_COMPOUND_ASSIGNMENT(-)
  ETM_BFLOAT_COMPOUND_ASSIGNMENT(*)
  ETM_BFLOAT_COMPOUND_ASSIGNMENT(/)
#undef ETM_BFLOAT_COMPOUND_ASSIGNMENT
};

static_assert(sizeof(bfloat) == 2 && alignof(bfloat) == 2, "bfloat must be 2 bytes");
static_assert(std::is_trivially_copyable<bfloat>::value, "bfloat must be trivially copyable");

namespace etm_msl {
template <class T> struct is_bfloat : std::is_same<std::remove_cv_t<T>, bfloat> {};
// Scalars Metal treats as arithmetic: C++'s, plus half and bfloat.
template <class T>
constexpr bool is_scalar_v = is_host_arithmetic_v<std::remove_cv_t<T>> || is_bfloat<T>::value;
template <class T>
constexpr bool is_float_scalar_v = std::is_floating_point<std::remove_cv_t<T>>::value ||
                                   is_half<T>::value || is_bfloat<T>::value;

// The type an operand of `cond ? self : other` is cast to by the translator
// (msl_conditionals.h), given both operands' decltype((...)): itself (type and value category),
// except that of a bfloat and another scalar both become their usual arithmetic conversion's
// type, as for Metal's built-in bfloat (float with float, half or double; bfloat with integers).
template <class Self, class Other, class = void>
struct conditional_arm {
  using type = Self;
};
template <class Self, class Other>
struct conditional_arm<Self, Other,
                       std::enable_if_t<is_bfloat<std::remove_reference_t<Self>>::value &&
                                        is_host_arithmetic_v<std::remove_cv_t<std::remove_reference_t<Other>>>>> {
  using type = bfloat::mixed_result_t<std::remove_cv_t<std::remove_reference_t<Other>>>;
};
template <class Self, class Other>
struct conditional_arm<Self, Other,
                       std::enable_if_t<is_host_arithmetic_v<std::remove_cv_t<std::remove_reference_t<Self>>> &&
                                        is_bfloat<std::remove_reference_t<Other>>::value>> {
  using type = std::conditional_t<
      std::is_same<bfloat::mixed_result_t<std::remove_cv_t<std::remove_reference_t<Self>>>, bfloat>::value,
      bfloat, Self>;
};
// The translator names both operands' types in one function type, so that its casts have no
// comma outside parentheses (they may sit in macro arguments); type_tag admits void operands.
template <class T>
struct type_tag {};
template <class Signature>
struct conditional_arm_of_signature;
template <class Self, class Other>
struct conditional_arm_of_signature<void(type_tag<Self>, type_tag<Other>)> : conditional_arm<Self, Other> {};
template <class Signature>
using conditional_arm_t = typename conditional_arm_of_signature<Signature>::type;
}  // namespace etm_msl

// MSL literal suffixes: 1.0h is half, 1.0bf is bfloat. Unprefixed suffixes are reserved for
// the implementation, which this library is. clang's lexer never hands `1.0bf` to a literal
// operator, so there the translator must rewrite bfloat literals.
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wuser-defined-literals"
constexpr half operator""h(long double value) { return half(value); }
#pragma clang diagnostic pop
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wliteral-suffix"
constexpr half operator""h(long double value) { return half(value); }
constexpr bfloat operator""bf(long double value) { return bfloat(float(value)); }
#pragma GCC diagnostic pop
#endif
