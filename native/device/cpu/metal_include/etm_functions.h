// Helpers that apply scalar functions component-wise to vector-like arguments (vectors and
// swizzles, mixed with scalars that are broadcast). Internal to the library.
#pragma once

#include "etm_traits.h"

namespace etm_msl {

template <class V>
constexpr bool is_float_vector_like_v = is_vector_like_v<V> && is_float_scalar_v<element_t<V>>;
template <class V>
constexpr bool is_integer_vector_like_v = is_vector_like_v<V> && std::is_integral<element_t<V>>::value &&
                                          !std::is_same<element_t<V>, bool>::value;
template <class T>
constexpr bool is_integer_scalar_v = std::is_integral<T>::value && !std::is_same<T, bool>::value;

// The vector type of a call whose arguments are vector-like or scalars; void when no argument
// is vector-like or the vector-like ones disagree in size or element type.
template <class... A> struct common_vector { using type = void; };
template <class A> struct common_vector<A> {
  using type = std::conditional_t<is_vector_like_v<A>, plain_vector_t<A>, void>;
};
template <class A, class B, class... Rest> struct common_vector<A, B, Rest...> {
  using rest = typename common_vector<B, Rest...>::type;
  using first = std::conditional_t<is_vector_like_v<A>, plain_vector_t<A>, void>;
  using type = std::conditional_t<
      std::is_void<first>::value, rest,
      std::conditional_t<std::is_void<rest>::value || std::is_same<rest, first>::value, first, void>>;
};
template <class... A> using common_vector_t = typename common_vector<A...>::type;

template <class... A>
constexpr bool are_vector_arguments_v =
    !std::is_void<common_vector_t<A...>>::value && ((is_vector_like_v<A> || is_scalar_v<A>) && ...);
template <class... A>
constexpr bool are_float_vector_arguments_v = [] {
  if constexpr (are_vector_arguments_v<A...>) {
    return is_float_scalar_v<element_t<common_vector_t<A...>>>;
  } else {
    return false;
  }
}();
template <class... A>
constexpr bool are_integer_vector_arguments_v = [] {
  if constexpr (are_vector_arguments_v<A...>) {
    return is_integer_scalar_v<element_t<common_vector_t<A...>>>;
  } else {
    return false;
  }
}();

// result[i] = f(component i of each argument), scalars broadcast and converted to the element type.
template <class F, class... A> constexpr auto map_components(F f, const A&... args) {
  using V = common_vector_t<A...>;
  using E = element_t<V>;
  using R = decltype(f(E(component(args, 0))...));
  etm_vec::vector<R, components_v<V>, false> result(zero_tag{});
  for (int i = 0; i < components_v<V>; ++i) result[i] = f(E(component(args, i))...);
  return result;
}

// Float math on half and bfloat is computed in float and rounded once.
template <class T> using compute_t = std::conditional_t<std::is_same<T, double>::value, double, float>;

}  // namespace etm_msl
