// Metal vector types: `floatN`, `halfN`, `intN` ... (N = 2, 3, 4) and their `packed_` forms.
//
// Layout is Metal's: an N-component vector of T is aligned to 2*sizeof(T) (N = 2) or
// 4*sizeof(T) (N = 3, 4), so float3 is 16 bytes; packed vectors are N*sizeof(T) bytes,
// aligned like T.
//
// Components are named members (x, y, z, w and r, g, b, a) so they can be read in constant
// expressions. Swizzles (`v.xy`, `v.zyx`, `v.rgba` ...) are members too: proxy objects that
// share the vector's storage through an anonymous union, so `v.xy = w.zw;` and
// `float4(a.xy, 1, 2)` work on the untranslated MSL text without changing sizeof.
// A swizzle with a repeated component (`v.xx`) is read-only, as in Metal. 4-component swizzles
// with a repeated component (`v.xxxx`) are not provided (see etm_swizzle_list.h for why).
#pragma once

#include "etm_bfloat.h"
#include "etm_swizzle_list.h"

namespace etm_vec {
// Only the vector types and their operators live here: it is the namespace argument-dependent
// lookup searches for vector arguments, so it must not offer any other name.
template <class T, int N, bool Packed> struct vector;
template <class T, int N, bool Packed, int Count, unsigned Code> struct swizzle;
}  // namespace etm_vec

namespace etm_msl {

template <class V> struct vector_traits {
  static constexpr bool is_vector = false;
  static constexpr int size = 1;
  using element = V;
};
template <class T, int N, bool P> struct vector_traits<etm_vec::vector<T, N, P>> {
  static constexpr bool is_vector = true;
  static constexpr int size = N;
  using element = T;
};
template <class T, int N, bool P, int M, unsigned C>
struct vector_traits<etm_vec::swizzle<T, N, P, M, C>> {
  static constexpr bool is_vector = true;
  static constexpr int size = M;
  using element = T;
};
template <class V> using traits_of = vector_traits<std::remove_cv_t<std::remove_reference_t<V>>>;
template <class V> constexpr bool is_vector_like_v = traits_of<V>::is_vector;
template <class V> constexpr int components_v = traits_of<V>::size;
template <class V> using element_t = typename traits_of<V>::element;
template <class V> using plain_vector_t = etm_vec::vector<element_t<V>, components_v<V>, false>;

template <class V> struct is_unpacked_vector : std::false_type {};
template <class T, int N> struct is_unpacked_vector<etm_vec::vector<T, N, false>> : std::true_type {};

// Reads component i of a vector-like value, or the value itself for a scalar.
template <class V> constexpr auto component(const V& value, int i) {
  if constexpr (is_vector_like_v<V>) {
    return value[i];
  } else {
    (void)i;
    return value;
  }
}

struct zero_tag {};

template <class A> constexpr bool is_component_argument_v = is_vector_like_v<A> || is_scalar_v<A>;

// Implicit scalar-to-vector splat only from built-in scalars (or the element type itself): with
// bfloat as a class, bfloat -> float and bfloat -> float2 would both be user-defined
// conversions, making f(float)/f(float2) overload pairs ambiguous.
template <class S, class T>
constexpr bool is_implicit_splat_v = is_scalar_v<S> && (!std::is_class<S>::value || std::is_same<S, T>::value);
template <class S, class T>
constexpr bool is_explicit_splat_v = is_scalar_v<S> && std::is_class<S>::value && !std::is_same<S, T>::value;

constexpr bool has_repeated_component(int count, unsigned code) {
  for (int i = 0; i < count; ++i)
    for (int j = i + 1; j < count; ++j)
      if (((code >> (2 * i)) & 3u) == ((code >> (2 * j)) & 3u)) return true;
  return false;
}

}  // namespace etm_msl

namespace etm_vec {

template <class T, int N, bool Packed, int Count, unsigned Code>
struct swizzle {
  // Kept minimal: every swizzle name is a member of every vector type, so each member
  // declared here is instantiated hundreds of times per vector type a kernel uses.
  using value_type = vector<T, Count, false>;

  static constexpr int source(int k) { return int((Code >> (2 * k)) & 3u); }

  value_type get() const {
    value_type result;
    for (int k = 0; k < Count; ++k) result[k] = elements[source(k)];
    return result;
  }
  operator value_type() const { return get(); }
  T operator[](int k) const { return elements[source(k)]; }

  // A template, so that deciding whether the enclosing union's members are copy-assignable
  // never has to enumerate the vector constructors (a large compile-time cost otherwise).
  template <class V, std::enable_if_t<etm_msl::is_component_argument_v<V>, int> = 0>
  swizzle& operator=(const V& value) {
    static_assert(!etm_msl::has_repeated_component(Count, Code),
                  "a swizzle with a repeated component cannot be assigned to");
    const value_type converted = value;
    for (int k = 0; k < Count; ++k) elements[source(k)] = converted[k];
    return *this;
  }
  swizzle& operator=(const swizzle& other) { return *this = other.get(); }

  // Storage shared with the enclosing vector's components (union member).
  T elements[N];
};

#define ETM_SWIZZLE_COMPOUND(op)                                                              \
  template <class T, int N, bool P, int M, unsigned C, class B>                               \
  swizzle<T, N, P, M, C>& operator op##=(swizzle<T, N, P, M, C>& target, const B& rhs) {      \
    return target = target.get() op rhs;                                                      \
  }
ETM_SWIZZLE_COMPOUND(+)
ETM_SWIZZLE_COMPOUND(-)
ETM_SWIZZLE_COMPOUND(*)
ETM_SWIZZLE_COMPOUND(/)
ETM_SWIZZLE_COMPOUND(%)
ETM_SWIZZLE_COMPOUND(&)
ETM_SWIZZLE_COMPOUND(|)
ETM_SWIZZLE_COMPOUND(^)
ETM_SWIZZLE_COMPOUND(<<)
ETM_SWIZZLE_COMPOUND(>>)
#undef ETM_SWIZZLE_COMPOUND

#define ETM_DECLARE_SWIZZLE(name, count, code) swizzle<T, N, Packed, count, code> name;

// Members shared by the 2-, 3- and 4-component vectors. The union makes the implicit copy
// assignment unavailable, so it is spelled out (component-wise, usable in constant expressions).
#define ETM_VECTOR_MEMBERS                                                                    \
  using value_type = T;                                                                       \
  static constexpr int size = N;                                                              \
                                                                                              \
  vector() = default;                                                                         \
  vector(const vector&) = default;                                                            \
  constexpr vector& operator=(const vector& other) {                                          \
    for (int i = 0; i < N; ++i) (*this)[i] = other[i];                                        \
    return *this;                                                                             \
  }                                                                                           \
  constexpr T& operator[](int i) {                                                            \
    if (__builtin_is_constant_evaluated()) return named_component(i);                         \
    return (&x)[i];                                                                           \
  }                                                                                           \
  constexpr const T& operator[](int i) const {                                                \
    if (__builtin_is_constant_evaluated()) return const_cast<vector*>(this)->named_component(i); \
    return (&x)[i];                                                                           \
  }                                                                                           \
                                                                                              \
  template <class S, std::enable_if_t<etm_msl::is_implicit_splat_v<S, T>, int> = 0>           \
  constexpr vector(S scalar) : vector(etm_msl::zero_tag{}) {                                  \
    for (int i = 0; i < N; ++i) (*this)[i] = T(scalar);                                       \
  }                                                                                           \
  template <class S, std::enable_if_t<etm_msl::is_explicit_splat_v<S, T>, int> = 0>           \
  constexpr explicit vector(S scalar) : vector(etm_msl::zero_tag{}) {                         \
    for (int i = 0; i < N; ++i) (*this)[i] = T(scalar);                                       \
  }                                                                                           \
  /* Brace initialization from scalars of one type: `float4 v = {1};` is (1, 0, 0, 0) as in */ \
  /* Metal, not a splat. A template, so that `uint2 p = {i, j}` converts instead of being a */   \
  /* narrowing error; mixed braces fall through to the constructor below. */                  \
  template <class U, std::enable_if_t<etm_msl::is_scalar_v<U>, int> = 0>                      \
  constexpr vector(std::initializer_list<U> values) : vector(etm_msl::zero_tag{}) {           \
    int next = 0;                                                                             \
    for (const U& value : values)                                                             \
      if (next < N) (*this)[next++] = T(value);                                               \
  }                                                                                           \
  /* From scalars and vectors, e.g. float4(v.xy, 1, 2); components not given are zero, */     \
  /* which is what a partial brace initializer `float4 v = {a.xy};` means in Metal. */        \
  template <class... A,                                                                       \
            std::enable_if_t<(sizeof...(A) >= 2) &&                                          \
                                 (etm_msl::is_component_argument_v<A> && ...) &&              \
                                 (etm_msl::components_v<A> + ...) <= N,                       \
                             int> = 0>                                                        \
  constexpr vector(const A&... parts) : vector(etm_msl::zero_tag{}) {                         \
    int next = 0;                                                                             \
    (append(next, parts), ...);                                                               \
  }                                                                                           \
  /* Element type conversions are explicit, as in Metal: float4(int4(...)). */                \
  template <class U, bool Q, std::enable_if_t<!std::is_same<U, T>::value, int> = 0>           \
  constexpr explicit vector(const vector<U, N, Q>& other) : vector(etm_msl::zero_tag{}) {     \
    for (int i = 0; i < N; ++i) (*this)[i] = T(other[i]);                                     \
  }                                                                                           \
  /* Packed and unpacked vectors convert implicitly into each other. */                       \
  constexpr vector(const vector<T, N, !Packed>& other) : vector(etm_msl::zero_tag{}) {        \
    for (int i = 0; i < N; ++i) (*this)[i] = other[i];                                        \
  }                                                                                           \
  template <int M, bool Q, unsigned C>                                                        \
  vector(const swizzle<T, M, Q, N, C>& other) : vector(other.get()) {}                        \
  template <class U, int M, bool Q, unsigned C, std::enable_if_t<!std::is_same<U, T>::value, int> = 0> \
  explicit vector(const swizzle<U, M, Q, N, C>& other) : vector(other.get()) {}               \
                                                                                              \
  template <class B> constexpr vector& operator+=(const B& rhs) { return *this = *this + rhs; } \
  template <class B> constexpr vector& operator-=(const B& rhs) { return *this = *this - rhs; } \
  template <class B> constexpr vector& operator*=(const B& rhs) { return *this = *this * rhs; } \
  template <class B> constexpr vector& operator/=(const B& rhs) { return *this = *this / rhs; } \
  template <class B> constexpr vector& operator%=(const B& rhs) { return *this = *this % rhs; } \
  template <class B> constexpr vector& operator&=(const B& rhs) { return *this = *this & rhs; } \
  template <class B> constexpr vector& operator|=(const B& rhs) { return *this = *this | rhs; } \
  template <class B> constexpr vector& operator^=(const B& rhs) { return *this = *this ^ rhs; } \
  template <class B> constexpr vector& operator<<=(const B& rhs) { return *this = *this << rhs; } \
  template <class B> constexpr vector& operator>>=(const B& rhs) { return *this = *this >> rhs; } \
  constexpr vector& operator++() { return *this += T(1); }                                    \
  constexpr vector& operator--() { return *this -= T(1); }                                    \
  constexpr vector operator++(int) {                                                          \
    vector old = *this;                                                                       \
    *this += T(1);                                                                            \
    return old;                                                                               \
  }                                                                                           \
  constexpr vector operator--(int) {                                                          \
    vector old = *this;                                                                       \
    *this -= T(1);                                                                            \
    return old;                                                                               \
  }                                                                                           \
                                                                                              \
 private:                                                                                     \
  template <class A> constexpr void append(int& next, const A& part) {                        \
    if constexpr (etm_msl::is_vector_like_v<A>) {                                             \
      for (int i = 0; i < etm_msl::components_v<A>; ++i) (*this)[next++] = T(part[i]);       \
    } else {                                                                                  \
      (*this)[next++] = T(part);                                                              \
    }                                                                                         \
  }                                                                                           \
                                                                                              \
 public:

template <class T, bool Packed>
struct alignas(Packed ? sizeof(T) : 2 * sizeof(T)) vector<T, 2, Packed> {
  static constexpr int N = 2;
  union {
    struct {
      T x, y;
    };
    struct {
      T r, g;
    };
    ETM_SWIZZLES_2(ETM_DECLARE_SWIZZLE)
  };
  constexpr explicit vector(etm_msl::zero_tag) : x(), y() {}
  constexpr vector(T x_value, T y_value) : x(x_value), y(y_value) {}
  ETM_VECTOR_MEMBERS
 private:
  constexpr T& named_component(int i) { return i == 0 ? x : y; }
};

template <class T, bool Packed>
struct alignas(Packed ? sizeof(T) : 4 * sizeof(T)) vector<T, 3, Packed> {
  static constexpr int N = 3;
  union {
    struct {
      T x, y, z;
    };
    struct {
      T r, g, b;
    };
    ETM_SWIZZLES_3(ETM_DECLARE_SWIZZLE)
  };
  constexpr explicit vector(etm_msl::zero_tag) : x(), y(), z() {}
  constexpr vector(T x_value, T y_value, T z_value) : x(x_value), y(y_value), z(z_value) {}
  ETM_VECTOR_MEMBERS
 private:
  constexpr T& named_component(int i) { return i == 0 ? x : i == 1 ? y : z; }
};

template <class T, bool Packed>
struct alignas(Packed ? sizeof(T) : 4 * sizeof(T)) vector<T, 4, Packed> {
  static constexpr int N = 4;
  union {
    struct {
      T x, y, z, w;
    };
    struct {
      T r, g, b, a;
    };
    ETM_SWIZZLES_4(ETM_DECLARE_SWIZZLE)
  };
  constexpr explicit vector(etm_msl::zero_tag) : x(), y(), z(), w() {}
  constexpr vector(T x_value, T y_value, T z_value, T w_value)
      : x(x_value), y(y_value), z(z_value), w(w_value) {}
  ETM_VECTOR_MEMBERS
 private:
  constexpr T& named_component(int i) { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

#undef ETM_VECTOR_MEMBERS
#undef ETM_DECLARE_SWIZZLE

// ---------------------------------------------------------------------------------- operators
// A op B is defined when at least one side is vector-like (a vector or a swizzle) and the other
// is a scalar or a vector-like value with the same component count and element type. Scalars
// are converted to the vector's element type; the result is an unpacked vector.
template <class A, class B>
constexpr bool is_vector_operation_v =
    (etm_msl::is_vector_like_v<A> && etm_msl::is_vector_like_v<B>)
        ? (etm_msl::components_v<A> == etm_msl::components_v<B> &&
           std::is_same<etm_msl::element_t<A>, etm_msl::element_t<B>>::value)
        : ((etm_msl::is_vector_like_v<A> && etm_msl::is_scalar_v<B>) ||
           (etm_msl::is_scalar_v<A> && etm_msl::is_vector_like_v<B>));

template <class A, class B>
using operation_vector_t =
    std::conditional_t<etm_msl::is_vector_like_v<A>, etm_msl::plain_vector_t<A>, etm_msl::plain_vector_t<B>>;

#define ETM_VECTOR_BINARY(op)                                                                 \
  template <class A, class B, std::enable_if_t<is_vector_operation_v<A, B>, int> = 0>         \
  constexpr operation_vector_t<A, B> operator op(const A& lhs, const B& rhs) {                \
    using R = operation_vector_t<A, B>;                                                       \
    using E = typename R::value_type;                                                         \
    R result(etm_msl::zero_tag{});                                                            \
    for (int i = 0; i < R::size; ++i)                                                         \
      result[i] = E(E(etm_msl::component(lhs, i)) op E(etm_msl::component(rhs, i)));          \
    return result;                                                                            \
  }
ETM_VECTOR_BINARY(+)
ETM_VECTOR_BINARY(-)
ETM_VECTOR_BINARY(*)
ETM_VECTOR_BINARY(/)
ETM_VECTOR_BINARY(%)
ETM_VECTOR_BINARY(&)
ETM_VECTOR_BINARY(|)
ETM_VECTOR_BINARY(^)
ETM_VECTOR_BINARY(<<)
ETM_VECTOR_BINARY(>>)
#undef ETM_VECTOR_BINARY

#define ETM_VECTOR_COMPARISON(op)                                                             \
  template <class A, class B, std::enable_if_t<is_vector_operation_v<A, B>, int> = 0>         \
  constexpr vector<bool, etm_msl::components_v<operation_vector_t<A, B>>, false> operator op( \
      const A& lhs, const B& rhs) {                                                           \
    using E = typename operation_vector_t<A, B>::value_type;                                  \
    constexpr int n = etm_msl::components_v<operation_vector_t<A, B>>;                        \
    vector<bool, n, false> result(etm_msl::zero_tag{});                                       \
    for (int i = 0; i < n; ++i)                                                               \
      result[i] = E(etm_msl::component(lhs, i)) op E(etm_msl::component(rhs, i));             \
    return result;                                                                            \
  }
ETM_VECTOR_COMPARISON(==)
ETM_VECTOR_COMPARISON(!=)
ETM_VECTOR_COMPARISON(<)
ETM_VECTOR_COMPARISON(<=)
ETM_VECTOR_COMPARISON(>)
ETM_VECTOR_COMPARISON(>=)
ETM_VECTOR_COMPARISON(&&)
ETM_VECTOR_COMPARISON(||)
#undef ETM_VECTOR_COMPARISON

#define ETM_VECTOR_UNARY(op, result_element)                                                  \
  template <class A, std::enable_if_t<etm_msl::is_vector_like_v<A>, int> = 0>                 \
  constexpr vector<result_element, etm_msl::components_v<A>, false> operator op(const A& value) { \
    constexpr int n = etm_msl::components_v<A>;                                               \
    vector<result_element, n, false> result(etm_msl::zero_tag{});                             \
    for (int i = 0; i < n; ++i) result[i] = result_element(op value[i]);                      \
    return result;                                                                            \
  }
ETM_VECTOR_UNARY(-, etm_msl::element_t<A>)
ETM_VECTOR_UNARY(+, etm_msl::element_t<A>)
ETM_VECTOR_UNARY(~, etm_msl::element_t<A>)
ETM_VECTOR_UNARY(!, bool)
#undef ETM_VECTOR_UNARY

}  // namespace etm_vec

// ------------------------------------------------------------------------------- type names
#define ETM_VECTOR_TYPEDEFS(T, name)               \
  typedef etm_vec::vector<T, 2, false> name##2;    \
  typedef etm_vec::vector<T, 3, false> name##3;    \
  typedef etm_vec::vector<T, 4, false> name##4;    \
  typedef etm_vec::vector<T, 2, true> packed_##name##2; \
  typedef etm_vec::vector<T, 3, true> packed_##name##3; \
  typedef etm_vec::vector<T, 4, true> packed_##name##4; \
  namespace metal {                                \
  using ::name##2;                                 \
  using ::name##3;                                 \
  using ::name##4;                                 \
  using ::packed_##name##2;                        \
  using ::packed_##name##3;                        \
  using ::packed_##name##4;                        \
  }
ETM_VECTOR_TYPEDEFS(bool, bool)
ETM_VECTOR_TYPEDEFS(char, char)
ETM_VECTOR_TYPEDEFS(uchar, uchar)
ETM_VECTOR_TYPEDEFS(short, short)
ETM_VECTOR_TYPEDEFS(ushort, ushort)
ETM_VECTOR_TYPEDEFS(int, int)
ETM_VECTOR_TYPEDEFS(uint, uint)
ETM_VECTOR_TYPEDEFS(long, long)
ETM_VECTOR_TYPEDEFS(ulong, ulong)
ETM_VECTOR_TYPEDEFS(half, half)
ETM_VECTOR_TYPEDEFS(bfloat, bfloat)
ETM_VECTOR_TYPEDEFS(float, float)
#undef ETM_VECTOR_TYPEDEFS

namespace metal {
template <class T, int N> using vec = etm_vec::vector<T, N, false>;

// Relational functions on vectors (metal_relational).
template <class V, std::enable_if_t<etm_msl::is_vector_like_v<V>, int> = 0>
constexpr bool all(const V& value) {
  for (int i = 0; i < etm_msl::components_v<V>; ++i)
    if (!value[i]) return false;
  return true;
}
template <class V, std::enable_if_t<etm_msl::is_vector_like_v<V>, int> = 0>
constexpr bool any(const V& value) {
  for (int i = 0; i < etm_msl::components_v<V>; ++i)
    if (value[i]) return true;
  return false;
}
constexpr bool all(bool value) { return value; }
constexpr bool any(bool value) { return value; }

// select(a, b, c): c ? b : a, per component.
template <class T, std::enable_if_t<etm_msl::is_scalar_v<T>, int> = 0>
constexpr T select(T a, T b, bool c) {
  return c ? b : a;
}
template <class A, class B, std::enable_if_t<etm_msl::is_vector_like_v<A>, int> = 0>
constexpr etm_msl::plain_vector_t<A> select(const A& a, const B& b, bool c) {
  return c ? etm_msl::plain_vector_t<A>(b) : etm_msl::plain_vector_t<A>(a);
}
template <class A, class B, class C,
          std::enable_if_t<etm_msl::is_vector_like_v<A> && etm_msl::is_vector_like_v<C> &&
                               etm_msl::components_v<A> == etm_msl::components_v<C>,
                           int> = 0>
constexpr etm_msl::plain_vector_t<A> select(const A& a, const B& b, const C& c) {
  etm_msl::plain_vector_t<A> result(etm_msl::zero_tag{});
  for (int i = 0; i < etm_msl::components_v<A>; ++i)
    result[i] = bool(etm_msl::component(c, i)) ? etm_msl::element_t<A>(etm_msl::component(b, i))
                                               : etm_msl::element_t<A>(a[i]);
  return result;
}
}  // namespace metal
