// as_type<T>(x): reinterprets the bits of x as T (same size). An MSL built-in, so it is visible
// at global scope as well as in namespace metal (c10 calls it unqualified).
#pragma once

#include "etm_vector.h"

namespace metal {
template <class To, class From>
constexpr To as_type(const From& value) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of the same size");
  if constexpr (std::is_trivially_copyable<To>::value && std::is_trivially_copyable<From>::value) {
    return __builtin_bit_cast(To, value);
  } else {
    To result;
    __builtin_memcpy(static_cast<void*>(&result), static_cast<const void*>(&value), sizeof(To));
    return result;
  }
}
}  // namespace metal

using metal::as_type;
