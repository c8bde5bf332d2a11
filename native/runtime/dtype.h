// Scalar types by their c10::ScalarType codes, which is what the ABI passes around.
#pragma once

#include <cstddef>
#include <cstdint>

namespace etm {

enum class DType : int32_t {
  uint8 = 0,
  int8 = 1,
  int16 = 2,
  int32 = 3,
  int64 = 4,
  float16 = 5,
  float32 = 6,
  float64 = 7,
  complex32 = 8,
  complex64 = 9,
  complex128 = 10,
  bool_ = 11,
  bfloat16 = 15,
  float8_e5m2 = 23,
  float8_e4m3fn = 24,
  float8_e5m2fnuz = 25,
  float8_e4m3fnuz = 26,
  uint16 = 27,
  uint32 = 28,
  uint64 = 29,
  float8_e8m0fnu = 44,
  float4_e2m1fn_x2 = 45,
};

// True for the dtypes tensors may have (the rest exist only as getter values).
bool is_tensor_dtype(int32_t code);
// complex32 (two float16), complex64 (two float32) or complex128 (two float64), real part first.
bool is_complex_dtype(int32_t code);
// Element size of a tensor dtype; throws etm::Error for any other code.
size_t element_size(int32_t code);
const char* dtype_name(int32_t code);

// Converts `count` elements between tensor dtypes (any pair), honoring strides given in
// elements. float16/bfloat16 round to nearest even; float -> integer truncates toward zero
// like a C cast; anything -> bool is "nonzero". A real value becomes (value, 0) in a complex
// dtype; complex -> real keeps the real part, as torch's copy_ does.
void convert_elements(const void* source, int32_t source_dtype, void* destination,
                      int32_t destination_dtype, size_t count);

}  // namespace etm
