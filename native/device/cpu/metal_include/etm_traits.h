// metal_type_traits and metal::numeric_limits: the standard traits Metal re-exports, plus
// Metal's own meaning for half, bfloat and vectors (is_floating_point_v<float4> is true;
// make_unsigned_t<int4> is uint4; numeric_limits<float2>::infinity() is (inf, inf)).
#pragma once

#include "etm_vector.h"

namespace etm_msl {
template <class T> using scalar_of_t = element_t<std::remove_cv_t<T>>;

template <class T, class Scalar> struct with_scalar { using type = Scalar; };
template <class T, int N, bool P, class Scalar> struct with_scalar<etm_vec::vector<T, N, P>, Scalar> {
  using type = etm_vec::vector<Scalar, N, P>;
};
template <class S> struct scalar_make_signed { using type = std::make_signed_t<S>; };
template <class S> struct scalar_make_unsigned { using type = std::make_unsigned_t<S>; };
}  // namespace etm_msl

namespace metal {
using std::add_const;
using std::add_const_t;
using std::add_cv;
using std::add_cv_t;
using std::add_lvalue_reference;
using std::add_lvalue_reference_t;
using std::add_pointer;
using std::add_pointer_t;
using std::add_rvalue_reference;
using std::add_rvalue_reference_t;
using std::add_volatile;
using std::add_volatile_t;
using std::bool_constant;
using std::common_type;
using std::common_type_t;
using std::conditional;
using std::conditional_t;
using std::conjunction;
using std::conjunction_v;
using std::decay;
using std::decay_t;
using std::declval;
using std::disjunction;
using std::disjunction_v;
using std::enable_if;
using std::enable_if_t;
using std::false_type;
using std::integral_constant;
using std::is_base_of;
using std::is_base_of_v;
using std::is_class;
using std::is_class_v;
using std::is_const;
using std::is_const_v;
using std::is_convertible;
using std::is_convertible_v;
using std::is_enum;
using std::is_enum_v;
using std::is_function;
using std::is_function_v;
using std::is_lvalue_reference;
using std::is_lvalue_reference_v;
using std::is_pointer;
using std::is_pointer_v;
using std::is_reference;
using std::is_reference_v;
using std::is_rvalue_reference;
using std::is_rvalue_reference_v;
using std::is_same;
using std::is_same_v;
using std::is_trivially_copyable;
using std::is_trivially_copyable_v;
using std::is_void;
using std::is_void_v;
using std::is_volatile;
using std::is_volatile_v;
using std::negation;
using std::negation_v;
using std::remove_const;
using std::remove_const_t;
using std::remove_cv;
using std::remove_cv_t;
using std::remove_extent;
using std::remove_extent_t;
using std::remove_pointer;
using std::remove_pointer_t;
using std::remove_reference;
using std::remove_reference_t;
using std::remove_volatile;
using std::remove_volatile_t;
using std::true_type;
using std::underlying_type;
using std::underlying_type_t;

// Apple's spellings of the logical traits, used by code that enables Metal internals (MLX).
template <class... B> using _disjunction = std::disjunction<B...>;
template <class... B> using _conjunction = std::conjunction<B...>;

// uniform<T>: a value the same in every thread. Converts to and from T.
template <class T> struct uniform {
  uniform() = default;
  constexpr uniform(T value) : value_(value) {}
  constexpr operator T() const { return value_; }

 private:
  T value_;
};
template <class T> constexpr uniform<T> make_uniform(T value) { return uniform<T>(value); }

// Address spaces do not exist on the CPU, so removing one changes nothing.
template <class T> struct remove_addrspace { using type = T; };
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;

template <class T> struct is_vector : bool_constant<etm_msl::is_unpacked_vector<remove_cv_t<T>>::value> {};
template <class T> constexpr bool is_vector_v = is_vector<T>::value;
template <class T> struct is_scalar : bool_constant<etm_msl::is_scalar_v<T>> {};
template <class T> constexpr bool is_scalar_v = is_scalar<T>::value;
template <class T>
struct is_floating_point : bool_constant<etm_msl::is_float_scalar_v<etm_msl::scalar_of_t<T>>> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> struct is_integral : std::is_integral<etm_msl::scalar_of_t<T>> {};
template <class T> constexpr bool is_integral_v = is_integral<T>::value;
template <class T> struct is_arithmetic : bool_constant<is_floating_point_v<T> || is_integral_v<T>> {};
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T>
struct is_signed : bool_constant<std::is_signed<etm_msl::scalar_of_t<T>>::value || is_floating_point_v<T>> {};
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> struct is_unsigned : std::is_unsigned<etm_msl::scalar_of_t<T>> {};
template <class T> constexpr bool is_unsigned_v = is_unsigned<T>::value;

template <class T> struct make_signed {
  using type = typename etm_msl::with_scalar<
      remove_cv_t<T>, typename etm_msl::scalar_make_signed<etm_msl::scalar_of_t<T>>::type>::type;
};
template <class T> using make_signed_t = typename make_signed<T>::type;
template <class T> struct make_unsigned {
  using type = typename etm_msl::with_scalar<
      remove_cv_t<T>, typename etm_msl::scalar_make_unsigned<etm_msl::scalar_of_t<T>>::type>::type;
};
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;

// Number of components: 1 for a scalar.
template <class T> struct vec_elements : integral_constant<int, etm_msl::components_v<T>> {};
template <class T> constexpr int vec_elements_v = vec_elements<T>::value;

template <class T> struct numeric_limits : std::numeric_limits<T> {};

template <> struct numeric_limits<half> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr bool has_denorm_loss = false;
  static constexpr bool is_iec559 = true;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 11;
  static constexpr int digits10 = 3;
  static constexpr int max_digits10 = 5;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -13;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent = 16;
  static constexpr int max_exponent10 = 4;
  static constexpr half min() { return half(0x1p-14f); }
  static constexpr half lowest() { return half(-65504.0f); }
  static constexpr half max() { return half(65504.0f); }
  static constexpr half epsilon() { return half(0x1p-10f); }
  static constexpr half round_error() { return half(0.5f); }
  static constexpr half infinity() { return half(__builtin_inff()); }
  static constexpr half quiet_NaN() { return half(__builtin_nanf("")); }
  static constexpr half signaling_NaN() { return __builtin_bit_cast(half, uint16_t(0x7d00)); }
  static constexpr half denorm_min() { return half(0x1p-24f); }
};

template <> struct numeric_limits<bfloat> {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr bool has_denorm_loss = false;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int radix = 2;
  static constexpr int min_exponent = -125;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent = 128;
  static constexpr int max_exponent10 = 38;
  static constexpr bfloat min() { return bfloat::from_bits(0x0080); }
  static constexpr bfloat lowest() { return bfloat::from_bits(0xff7f); }
  static constexpr bfloat max() { return bfloat::from_bits(0x7f7f); }
  static constexpr bfloat epsilon() { return bfloat::from_bits(0x3c00); }
  static constexpr bfloat round_error() { return bfloat::from_bits(0x3f00); }
  static constexpr bfloat infinity() { return bfloat::from_bits(0x7f80); }
  static constexpr bfloat quiet_NaN() { return bfloat::from_bits(0x7fc0); }
  static constexpr bfloat signaling_NaN() { return bfloat::from_bits(0x7fa0); }
  static constexpr bfloat denorm_min() { return bfloat::from_bits(0x0001); }
};

// Vectors: every component holds the scalar's limit.
template <class T, int N, bool P> struct numeric_limits<etm_vec::vector<T, N, P>> {
  using scalar_limits = numeric_limits<T>;
  using type = etm_vec::vector<T, N, P>;
  static constexpr bool is_specialized = scalar_limits::is_specialized;
  static constexpr bool is_signed = scalar_limits::is_signed;
  static constexpr bool is_integer = scalar_limits::is_integer;
  static constexpr bool has_infinity = scalar_limits::has_infinity;
  static constexpr bool has_quiet_NaN = scalar_limits::has_quiet_NaN;
  static constexpr int digits = scalar_limits::digits;
  static constexpr type min() { return type(scalar_limits::min()); }
  static constexpr type lowest() { return type(scalar_limits::lowest()); }
  static constexpr type max() { return type(scalar_limits::max()); }
  static constexpr type epsilon() { return type(scalar_limits::epsilon()); }
  static constexpr type infinity() { return type(scalar_limits::infinity()); }
  static constexpr type quiet_NaN() { return type(scalar_limits::quiet_NaN()); }
  static constexpr type denorm_min() { return type(scalar_limits::denorm_min()); }
};
}  // namespace metal
