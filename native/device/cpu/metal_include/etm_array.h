// metal_array: metal::array<T, N>, a fixed-size aggregate like std::array.
#pragma once

#include "etm_base.h"

namespace metal {
template <class T, size_t N>
struct array {
  T elements[N > 0 ? N : 1];

  constexpr T& operator[](size_t i) { return elements[i]; }
  constexpr const T& operator[](size_t i) const { return elements[i]; }
  static constexpr size_t size() { return N; }
  static constexpr bool empty() { return N == 0; }
  constexpr T* data() { return elements; }
  constexpr const T* data() const { return elements; }
  constexpr T* begin() { return elements; }
  constexpr const T* begin() const { return elements; }
  constexpr T* end() { return elements + N; }
  constexpr const T* end() const { return elements + N; }
  constexpr T& front() { return elements[0]; }
  constexpr const T& front() const { return elements[0]; }
  constexpr T& back() { return elements[N - 1]; }
  constexpr const T& back() const { return elements[N - 1]; }
};
}  // namespace metal
