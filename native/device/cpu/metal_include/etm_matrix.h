// Metal's matrix types (metal_matrix): floatCxR and halfCxR, C columns of R-component column
// vectors (C, R in 2..4), stored column after column as Metal lays them out.
// Construction: from one scalar (the diagonal, zeros elsewhere), from C column vectors, from
// C*R scalars in column-major order, or explicitly from a matrix of another element type.
// m[i] is column i. Operators: matrix +/- matrix, matrix * scalar, matrix * vector (a column
// vector of C components gives R), vector * matrix (a row vector of R components gives C),
// matrix * matrix (CxR times KxC gives KxR), unary minus and the compound forms.
#pragma once

#include "etm_vector.h"

namespace etm_vec {

template <class T, int C, int R>
struct matrix {
  static_assert(C >= 2 && C <= 4 && R >= 2 && R <= 4, "Metal's matrices have 2 to 4 columns and rows");
  using column_type = vector<T, R, false>;
  column_type columns[C];

  matrix() = default;
  constexpr explicit matrix(T diagonal) : columns() {
    for (int c = 0; c < C; ++c) {
      columns[c] = column_type(T(0));
      if (c < R) columns[c][c] = diagonal;
    }
  }
  template <class... V, std::enable_if_t<sizeof...(V) == C && (std::is_convertible<const V&, column_type>::value && ...) &&
                                             (etm_msl::is_vector_like_v<V> && ...),
                                         int> = 0>
  constexpr matrix(const V&... column_values) : columns{column_type(column_values)...} {}
  template <class... S, std::enable_if_t<sizeof...(S) == C * R && C * R != 1 && (etm_msl::is_scalar_v<S> && ...), int> = 0>
  constexpr matrix(S... values) : columns() {
    const T all[] = {T(values)...};
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) columns[c][r] = all[c * R + r];
  }
  template <class U, std::enable_if_t<!std::is_same<U, T>::value, int> = 0>
  constexpr explicit matrix(const matrix<U, C, R>& other) : columns() {
    for (int c = 0; c < C; ++c) columns[c] = column_type(other[c]);
  }

  constexpr column_type& operator[](int c) { return columns[c]; }
  constexpr const column_type& operator[](int c) const { return columns[c]; }

  constexpr matrix& operator+=(const matrix& rhs) { return *this = *this + rhs; }
  constexpr matrix& operator-=(const matrix& rhs) { return *this = *this - rhs; }
  constexpr matrix& operator*=(T rhs) { return *this = *this * rhs; }
  constexpr matrix& operator*=(const matrix<T, C, C>& rhs) { return *this = *this * rhs; }

  friend constexpr matrix operator+(const matrix& a, const matrix& b) {
    matrix result{};
    for (int c = 0; c < C; ++c) result.columns[c] = a.columns[c] + b.columns[c];
    return result;
  }
  friend constexpr matrix operator-(const matrix& a, const matrix& b) {
    matrix result{};
    for (int c = 0; c < C; ++c) result.columns[c] = a.columns[c] - b.columns[c];
    return result;
  }
  friend constexpr matrix operator-(const matrix& a) {
    matrix result{};
    for (int c = 0; c < C; ++c) result.columns[c] = -a.columns[c];
    return result;
  }
  friend constexpr matrix operator*(const matrix& a, T s) {
    matrix result{};
    for (int c = 0; c < C; ++c) result.columns[c] = a.columns[c] * s;
    return result;
  }
  friend constexpr matrix operator*(T s, const matrix& a) { return a * s; }
  // Column vector: the columns weighted by its components.
  template <bool P>
  friend constexpr column_type operator*(const matrix& a, const vector<T, C, P>& v) {
    column_type result = a.columns[0] * v[0];
    for (int c = 1; c < C; ++c) result += a.columns[c] * v[c];
    return result;
  }
  // Row vector: its dot product with each column.
  template <bool P>
  friend constexpr vector<T, C, false> operator*(const vector<T, R, P>& v, const matrix& a) {
    vector<T, C, false> result(T(0));
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) result[c] += v[r] * a.columns[c][r];
    return result;
  }
  template <int K>
  friend constexpr matrix<T, K, R> operator*(const matrix& a, const matrix<T, K, C>& b) {
    matrix<T, K, R> result{};
    for (int k = 0; k < K; ++k) result[k] = a * b[k];
    return result;
  }
};

}  // namespace etm_vec

namespace metal {
template <class T, int C, int R> using matrix = etm_vec::matrix<T, C, R>;

template <class T, int C, int R>
constexpr etm_vec::matrix<T, R, C> transpose(const etm_vec::matrix<T, C, R>& m) {
  etm_vec::matrix<T, R, C> result{};
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) result[r][c] = m[c][r];
  return result;
}
}  // namespace metal

#define ETM_MATRIX_TYPEDEFS(T)                                                     \
  typedef etm_vec::matrix<T, 2, 2> T##2x2;                                         \
  typedef etm_vec::matrix<T, 2, 3> T##2x3;                                         \
  typedef etm_vec::matrix<T, 2, 4> T##2x4;                                         \
  typedef etm_vec::matrix<T, 3, 2> T##3x2;                                         \
  typedef etm_vec::matrix<T, 3, 3> T##3x3;                                         \
  typedef etm_vec::matrix<T, 3, 4> T##3x4;                                         \
  typedef etm_vec::matrix<T, 4, 2> T##4x2;                                         \
  typedef etm_vec::matrix<T, 4, 3> T##4x3;                                         \
  typedef etm_vec::matrix<T, 4, 4> T##4x4;                                         \
  namespace metal {                                                                \
  using ::T##2x2; using ::T##2x3; using ::T##2x4; using ::T##3x2; using ::T##3x3; \
  using ::T##3x4; using ::T##4x2; using ::T##4x3; using ::T##4x4;                 \
  }
ETM_MATRIX_TYPEDEFS(float)
ETM_MATRIX_TYPEDEFS(half)
#undef ETM_MATRIX_TYPEDEFS
