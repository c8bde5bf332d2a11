// Evaluates conversions and math functions of the emulated Metal standard library on inputs
// read from stdin, so that the test can compare them with numpy.
//
// Input: commands `<operation> <count>` followed by count * arity hexadecimal words (the bits
// of float arguments, or of half values for float_from_half). Output: per command, one line
// `<operation> <result words...>` with the bits of each result (float bits for math results).
#include <cstdio>
#include <cstring>

#include <metal_stdlib>

namespace {

uint32_t float_bits(float value) { return as_type<uint32_t>(value); }
float bits_float(uint32_t bits) { return as_type<float>(bits); }

struct operation {
  const char* name;
  int arity;
  uint32_t (*evaluate)(const uint32_t* arguments);
};

#define CONVERSION(name, expression) \
  {#name, 1, [](const uint32_t* a) -> uint32_t { return uint32_t(expression); }}
// One math function for float (f32.), half (f16.) and bfloat (bf16.). The arguments are float
// bits; the test sends values exactly representable in the evaluated type. bfloat arguments
// go through float (Metal has no bfloat overloads) and the result is stored back as bfloat.
#define UNARY(function)                                                                                   \
  {"f32." #function, 1, [](const uint32_t* a) { return float_bits(metal::function(bits_float(a[0]))); }}, \
  {"f16." #function, 1, [](const uint32_t* a) { return float_bits(float(metal::function(half(bits_float(a[0]))))); }}, \
  {"bf16." #function, 1, [](const uint32_t* a) { return float_bits(float(bfloat(metal::function(bfloat(bits_float(a[0])))))); }}
#define BINARY(function)                                                                                   \
  {"f32." #function, 2,                                                                                    \
   [](const uint32_t* a) { return float_bits(metal::function(bits_float(a[0]), bits_float(a[1]))); }},     \
  {"f16." #function, 2,                                                                                    \
   [](const uint32_t* a) {                                                                                 \
     return float_bits(float(metal::function(half(bits_float(a[0])), half(bits_float(a[1])))));            \
   }},                                                                                                     \
  {"bf16." #function, 2,                                                                                   \
   [](const uint32_t* a) {                                                                                 \
     return float_bits(float(bfloat(metal::function(bfloat(bits_float(a[0])), bfloat(bits_float(a[1]))))));  \
   }}

const operation operations[] = {
    CONVERSION(half_from_float, as_type<ushort>(half(bits_float(a[0])))),
    CONVERSION(bfloat_from_float, as_type<ushort>(bfloat(bits_float(a[0])))),
    CONVERSION(float_from_half, float_bits(float(as_type<half>(ushort(a[0]))))),
    CONVERSION(float_from_bfloat, float_bits(float(as_type<bfloat>(ushort(a[0]))))),
    CONVERSION(half_from_int, as_type<ushort>(half(int(a[0])))),
    CONVERSION(int_from_float, int(bits_float(a[0]))),
    UNARY(exp), UNARY(exp2), UNARY(exp10), UNARY(log), UNARY(log2), UNARY(log10),
    UNARY(sqrt), UNARY(rsqrt), UNARY(sin), UNARY(cos), UNARY(tan), UNARY(asin), UNARY(acos),
    UNARY(atan), UNARY(sinh), UNARY(cosh), UNARY(tanh), UNARY(asinh), UNARY(acosh), UNARY(atanh),
    UNARY(sinpi), UNARY(cospi), UNARY(tanpi), UNARY(floor), UNARY(ceil), UNARY(trunc),
    UNARY(round), UNARY(rint), UNARY(fract), UNARY(fabs),
    BINARY(pow), BINARY(powr), BINARY(atan2), BINARY(fmod), BINARY(fmin), BINARY(fmax),
    BINARY(copysign), BINARY(fdim),
    {"f32.fma", 3,
     [](const uint32_t* a) { return float_bits(metal::fma(bits_float(a[0]), bits_float(a[1]), bits_float(a[2]))); }},
};

}  // namespace

int main() {
  char name[64];
  unsigned count = 0;
  while (std::scanf("%63s %u", name, &count) == 2) {
    const operation* found = nullptr;
    for (const operation& candidate : operations)
      if (std::strcmp(candidate.name, name) == 0) found = &candidate;
    if (!found) {
      std::fprintf(stderr, "unknown operation %s\n", name);
      return 2;
    }
    std::printf("%s", name);
    for (unsigned i = 0; i < count; ++i) {
      uint32_t arguments[3] = {};
      for (int k = 0; k < found->arity; ++k)
        if (std::scanf("%x", &arguments[k]) != 1) {
          std::fprintf(stderr, "missing argument for %s\n", name);
          return 2;
        }
      std::printf(" %x", found->evaluate(arguments));
    }
    std::printf("\n");
  }
  return 0;
}
