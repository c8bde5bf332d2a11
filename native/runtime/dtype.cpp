#include "runtime/dtype.h"

#include <cmath>
#include <cstring>

#include "runtime/error.h"

namespace etm {
namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return float_from_bits(sign);
    // Subnormal half: value = mantissa * 2^-24.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return float_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t float_to_half(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {  // inf or NaN (keep NaN quiet)
    return sign | 0x7c00u | (abs_bits > 0x7f800000u ? 0x200u | ((abs_bits >> 13) & 0x3ffu) : 0);
  }
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow
  if (abs_bits < 0x38800000u) {
    // Result is subnormal or zero: round value / 2^-24 to nearest even integer.
    const float magnitude = float_from_bits(abs_bits);
    const float scaled = magnitude * 16777216.0f;  // exact: multiplying by a power of two
    const float rounded = std::nearbyint(scaled);  // default rounding mode: ties to even
    return sign | static_cast<uint16_t>(rounded);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t half_bits = ((abs_bits >> 13) - (112u << 10));
  const uint32_t dropped = abs_bits & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half_bits & 1u))) ++half_bits;
  return sign | static_cast<uint16_t>(half_bits);
}

float bfloat_to_float(uint16_t b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bfloat(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

bool is_complex(DType t) {
  return t == DType::complex32 || t == DType::complex64 || t == DType::complex128;
}

bool is_integral(DType t) {
  switch (t) {
    case DType::uint8: case DType::int8: case DType::int16: case DType::int32:
    case DType::int64: case DType::uint16: case DType::uint32: case DType::uint64:
    case DType::bool_:
      return true;
    default:
      return false;
  }
}

template <typename T>
T read(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <typename T>
void write(unsigned char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

double load_double(const unsigned char* p, DType t) {
  switch (t) {
    case DType::uint8: return read<uint8_t>(p);
    case DType::int8: return read<int8_t>(p);
    case DType::int16: return read<int16_t>(p);
    case DType::int32: return read<int32_t>(p);
    case DType::int64: return static_cast<double>(read<int64_t>(p));
    case DType::uint16: return read<uint16_t>(p);
    case DType::uint32: return read<uint32_t>(p);
    case DType::uint64: return static_cast<double>(read<uint64_t>(p));
    case DType::bool_: return read<uint8_t>(p) != 0;
    case DType::float16: return half_to_float(read<uint16_t>(p));
    case DType::bfloat16: return bfloat_to_float(read<uint16_t>(p));
    case DType::float32: return read<float>(p);
    case DType::float64: return read<double>(p);
    default: fail("cannot convert from dtype ", dtype_name(static_cast<int32_t>(t)));
  }
}

int64_t load_integer(const unsigned char* p, DType t) {
  switch (t) {
    case DType::uint8: return read<uint8_t>(p);
    case DType::int8: return read<int8_t>(p);
    case DType::int16: return read<int16_t>(p);
    case DType::int32: return read<int32_t>(p);
    case DType::int64: return read<int64_t>(p);
    case DType::uint16: return read<uint16_t>(p);
    case DType::uint32: return read<uint32_t>(p);
    case DType::uint64: return static_cast<int64_t>(read<uint64_t>(p));
    case DType::bool_: return read<uint8_t>(p) != 0;
    default: fail("not an integer dtype");
  }
}

template <typename T>
T cast_from_double(double v) {
  if (std::isnan(v)) return T(0);
  return static_cast<T>(v);
}

void store_double(unsigned char* p, DType t, double v) {
  switch (t) {
    case DType::uint8: write<uint8_t>(p, static_cast<uint8_t>(cast_from_double<int64_t>(v))); break;
    case DType::int8: write<int8_t>(p, static_cast<int8_t>(cast_from_double<int64_t>(v))); break;
    case DType::int16: write<int16_t>(p, static_cast<int16_t>(cast_from_double<int64_t>(v))); break;
    case DType::int32: write<int32_t>(p, static_cast<int32_t>(cast_from_double<int64_t>(v))); break;
    case DType::int64: write<int64_t>(p, cast_from_double<int64_t>(v)); break;
    case DType::uint16: write<uint16_t>(p, static_cast<uint16_t>(cast_from_double<int64_t>(v))); break;
    case DType::uint32: write<uint32_t>(p, static_cast<uint32_t>(cast_from_double<int64_t>(v))); break;
    case DType::uint64: write<uint64_t>(p, cast_from_double<uint64_t>(v)); break;
    case DType::bool_: write<uint8_t>(p, v != 0.0); break;
    case DType::float16: write<uint16_t>(p, float_to_half(static_cast<float>(v))); break;
    case DType::bfloat16: write<uint16_t>(p, float_to_bfloat(static_cast<float>(v))); break;
    case DType::float32: write<float>(p, static_cast<float>(v)); break;
    case DType::float64: write<double>(p, v); break;
    default: fail("cannot convert to dtype ", dtype_name(static_cast<int32_t>(t)));
  }
}

struct Complex {
  double real;
  double imag;
};

// A real dtype's value reads as (value, 0).
Complex load_complex(const unsigned char* p, DType t) {
  switch (t) {
    case DType::complex32: return {half_to_float(read<uint16_t>(p)), half_to_float(read<uint16_t>(p + 2))};
    case DType::complex64: return {read<float>(p), read<float>(p + 4)};
    case DType::complex128: return {read<double>(p), read<double>(p + 8)};
    default: return {load_double(p, t), 0.0};
  }
}

// A real dtype keeps the real part (torch discards the imaginary part in such a copy); bool
// tests both parts.
void store_complex(unsigned char* p, DType t, Complex v) {
  switch (t) {
    case DType::complex32:
      write<uint16_t>(p, float_to_half(static_cast<float>(v.real)));
      write<uint16_t>(p + 2, float_to_half(static_cast<float>(v.imag)));
      break;
    case DType::complex64:
      write<float>(p, static_cast<float>(v.real));
      write<float>(p + 4, static_cast<float>(v.imag));
      break;
    case DType::complex128:
      write<double>(p, v.real);
      write<double>(p + 8, v.imag);
      break;
    case DType::bool_: write<uint8_t>(p, v.real != 0.0 || v.imag != 0.0); break;
    default: store_double(p, t, v.real);
  }
}

void store_integer(unsigned char* p, DType t, int64_t v) {
  switch (t) {
    case DType::uint8: write<uint8_t>(p, static_cast<uint8_t>(v)); break;
    case DType::int8: write<int8_t>(p, static_cast<int8_t>(v)); break;
    case DType::int16: write<int16_t>(p, static_cast<int16_t>(v)); break;
    case DType::int32: write<int32_t>(p, static_cast<int32_t>(v)); break;
    case DType::int64: write<int64_t>(p, v); break;
    case DType::uint16: write<uint16_t>(p, static_cast<uint16_t>(v)); break;
    case DType::uint32: write<uint32_t>(p, static_cast<uint32_t>(v)); break;
    case DType::uint64: write<uint64_t>(p, static_cast<uint64_t>(v)); break;
    case DType::bool_: write<uint8_t>(p, v != 0); break;
    default: fail("not an integer dtype");
  }
}

}  // namespace

bool is_complex_dtype(int32_t code) { return is_complex(static_cast<DType>(code)); }

bool is_tensor_dtype(int32_t code) {
  switch (static_cast<DType>(code)) {
    case DType::uint8: case DType::int8: case DType::int16: case DType::int32:
    case DType::int64: case DType::float16: case DType::float32: case DType::float64:
    case DType::bool_: case DType::bfloat16: case DType::uint16: case DType::uint32:
    case DType::uint64: case DType::complex32: case DType::complex64: case DType::complex128:
      return true;
    default:
      return false;
  }
}

size_t element_size(int32_t code) {
  switch (static_cast<DType>(code)) {
    case DType::uint8: case DType::int8: case DType::bool_: return 1;
    case DType::int16: case DType::float16: case DType::bfloat16: case DType::uint16: return 2;
    case DType::int32: case DType::float32: case DType::uint32: case DType::complex32: return 4;
    case DType::int64: case DType::float64: case DType::uint64: case DType::complex64: return 8;
    case DType::complex128: return 16;
    default: fail("unsupported dtype ", dtype_name(code), " (code ", code, ")");
  }
}

const char* dtype_name(int32_t code) {
  switch (static_cast<DType>(code)) {
    case DType::uint8: return "uint8";
    case DType::int8: return "int8";
    case DType::int16: return "int16";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::float16: return "float16";
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::complex32: return "complex32";
    case DType::complex64: return "complex64";
    case DType::complex128: return "complex128";
    case DType::bool_: return "bool";
    case DType::bfloat16: return "bfloat16";
    case DType::float8_e5m2: return "float8_e5m2";
    case DType::float8_e4m3fn: return "float8_e4m3fn";
    case DType::float8_e5m2fnuz: return "float8_e5m2fnuz";
    case DType::float8_e4m3fnuz: return "float8_e4m3fnuz";
    case DType::uint16: return "uint16";
    case DType::uint32: return "uint32";
    case DType::uint64: return "uint64";
    case DType::float8_e8m0fnu: return "float8_e8m0fnu";
    case DType::float4_e2m1fn_x2: return "float4_e2m1fn_x2";
  }
  return "unknown";
}

void convert_elements(const void* source, int32_t source_dtype, void* destination,
                      int32_t destination_dtype, size_t count) {
  const auto from = static_cast<DType>(source_dtype);
  const auto to = static_cast<DType>(destination_dtype);
  const size_t from_size = element_size(source_dtype);
  const size_t to_size = element_size(destination_dtype);
  auto* in = static_cast<const unsigned char*>(source);
  auto* out = static_cast<unsigned char*>(destination);
  if (from == to) {
    std::memcpy(out, in, count * from_size);
    return;
  }
  // Integer to integer goes through int64 so that 64-bit values survive exactly.
  const bool integer_path = is_integral(from) && is_integral(to);
  const bool complex_path = is_complex(from) || is_complex(to);
  for (size_t i = 0; i < count; ++i, in += from_size, out += to_size) {
    if (complex_path)
      store_complex(out, to, load_complex(in, from));
    else if (integer_path)
      store_integer(out, to, load_integer(in, from));
    else
      store_double(out, to, load_double(in, from));
  }
}

}  // namespace etm
