// Scalar and vector semantics of the emulated Metal standard library, checked against values
// computed by hand. Compile-time facts are static_asserts; run-time ones print each failure
// and make the program exit non-zero.
#include <cstdio>

#include <metal_stdlib>

using namespace metal;

namespace {

int failures = 0;

#define CHECK(condition)                                                    \
  do {                                                                      \
    if (!(condition)) {                                                     \
      std::printf("FAILED line %d: %s\n", __LINE__, #condition);            \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

template <class V, class... E> bool equals(const V& v, E... expected) {
  const decltype(v[0] + v[0]) values[] = {decltype(v[0] + v[0])(expected)...};
  for (int i = 0; i < int(sizeof...(E)); ++i)
    if (!(v[i] == values[i])) return false;
  return vec_elements_v<V> == int(sizeof...(E));
}

// ------------------------------------------------------------------ layout (compile time)
#define LAYOUT(type, size, alignment) \
  static_assert(sizeof(type) == size && alignof(type) == alignment, #type " layout");
LAYOUT(float2, 8, 8)
LAYOUT(float3, 16, 16)
LAYOUT(float4, 16, 16)
LAYOUT(packed_float2, 8, 4)
LAYOUT(packed_float3, 12, 4)
LAYOUT(packed_float4, 16, 4)
LAYOUT(half2, 4, 4)
LAYOUT(half3, 8, 8)
LAYOUT(half4, 8, 8)
LAYOUT(packed_half3, 6, 2)
LAYOUT(bfloat3, 8, 8)
LAYOUT(bool2, 2, 2)
LAYOUT(bool3, 4, 4)
LAYOUT(bool4, 4, 4)
LAYOUT(char3, 4, 4)
LAYOUT(uchar4, 4, 4)
LAYOUT(short3, 8, 8)
LAYOUT(ushort2, 4, 4)
LAYOUT(int3, 16, 16)
LAYOUT(uint2, 8, 8)
LAYOUT(long2, 16, 16)
LAYOUT(long3, 32, 32)
LAYOUT(ulong4, 32, 32)
LAYOUT(packed_long3, 24, 8)
LAYOUT(half, 2, 2)
LAYOUT(bfloat, 2, 2)
LAYOUT(atomic_int, 4, 4)
LAYOUT(atomic_float, 4, 4)
LAYOUT(simdgroup_float8x8, 8, 8)
#undef LAYOUT

// ------------------------------------------------------- literal types (compile time)
constexpr float4 constant_vector(1.0f, 2.0f, 3.0f, 4.0f);
static_assert(constant_vector.x == 1.0f && constant_vector.w == 4.0f && constant_vector[2] == 3.0f);
constexpr uint2 split_long(ulong value) { return uint2(uint(value >> 32), uint(value & 0xffffffffu)); }
static_assert(split_long(0x0000000500000007ul).x == 5 && split_long(0x0000000500000007ul).y == 7);
constexpr uint2 brace_initialized = {3u, 4u};
static_assert(brace_initialized.y == 4u);
static_assert(numeric_limits<float2>::infinity().x == __builtin_inff());
static_assert(float(numeric_limits<half>::max()) == 65504.0f);
static_assert(float(numeric_limits<half>::lowest()) == -65504.0f);
static_assert(float(numeric_limits<half>::epsilon()) == 0x1p-10f);
static_assert(float(numeric_limits<half>::min()) == 0x1p-14f);
static_assert(float(numeric_limits<bfloat>::max()) == 0x1.fep+127f);
static_assert(float(numeric_limits<bfloat>::min()) == 0x1p-126f);
static_assert(float(numeric_limits<bfloat>::epsilon()) == 0x1p-7f);
static_assert(float(numeric_limits<bfloat>::denorm_min()) == 0x1p-133f);
static_assert(numeric_limits<int>::max() == 2147483647 && numeric_limits<long>::lowest() == -9223372036854775807l - 1);
static_assert(float(bfloat(1.0f) + bfloat(2.0f)) == 3.0f);
static_assert(as_type<uint>(1.0f) == 0x3f800000u);
static_assert(float(1.5h) == 1.5f && float(2.5bf) == 2.5f);

// --------------------------------------------------------------- traits (compile time)
static_assert(is_floating_point_v<half> && is_floating_point_v<bfloat> && is_floating_point_v<float4>);
static_assert(!is_floating_point_v<int> && is_integral_v<uint3> && is_signed_v<half> && is_unsigned_v<ushort>);
static_assert(is_scalar_v<half> && is_scalar_v<bfloat> && !is_scalar_v<float2>);
static_assert(is_vector_v<float2> && !is_vector_v<float> && vec_elements_v<half3> == 3 && vec_elements_v<int> == 1);
static_assert(is_same_v<make_unsigned_t<int4>, uint4> && is_same_v<make_signed_t<uchar>, signed char>);
static_assert(is_same_v<remove_addrspace_t<const float>, const float> && is_same_v<enable_if_t<true, int>, int>);
static_assert(bool_constant<true>::value && is_convertible_v<int, float>);
static_assert(is_same_v<vec<float, 4>, float4> && is_same_v<decltype(float4() + float4()), float4>);
static_assert(is_same_v<decltype(bfloat() + bfloat()), bfloat> && is_same_v<decltype(bfloat() * 2), bfloat>);
static_assert(is_same_v<decltype(bfloat() + 1.0f), float> && is_same_v<decltype(half() + half()), half>);
static_assert(is_same_v<decltype(float4() < 1.0f), bool4> && is_same_v<decltype(uchar4() + uchar4()), uchar4>);
static_assert(is_same_v<decltype(metal::exp(half())), half> && is_same_v<decltype(metal::fast::exp(float2())), float2>);
// Apple's math has no bfloat scalar overloads: bfloat converts to float (MLX adds its own).
static_assert(is_same_v<decltype(metal::exp(bfloat())), float> && is_same_v<decltype(metal::isnan(half3())), bool3>);
static_assert(is_same_v<decltype(metal::exp(bfloat4())), bfloat4> && is_same_v<decltype(metal::max(bfloat(), bfloat())), float>);
static_assert(is_same_v<decltype(metal::precise::sqrt(float4().xy)), float2>);

void swizzles() {
  float4 v(1.0f, 2.0f, 3.0f, 4.0f);
  const float4 w(5.0f, 6.0f, 7.0f, 8.0f);
  CHECK(equals(float3(v.zyx), 3, 2, 1));
  CHECK(equals(float2(v.ww), 4, 4));
  CHECK(equals(float4(v.wzyx), 4, 3, 2, 1));
  CHECK(v.r == 1.0f && v.a == 4.0f && equals(float3(v.bgr), 3, 2, 1));
  v.xy = w.zw;
  CHECK(equals(v, 7, 8, 3, 4));
  v.zw = w.zw;  // the same swizzle on both sides, from a const vector
  CHECK(equals(v, 7, 8, 7, 8));
  v.yx = v.xy;  // overlapping source and target
  CHECK(equals(v, 8, 7, 7, 8));
  v.wx += 1.0f;
  CHECK(equals(v, 9, 7, 7, 9));
  v.xz *= float2(2.0f, 3.0f);
  CHECK(equals(v, 18, 7, 21, 9));
  v.rgb = 0.5f;
  CHECK(equals(v, 0.5f, 0.5f, 0.5f, 9));
  v.wzyx = float4(1, 2, 3, 4);
  CHECK(equals(v, 4, 3, 2, 1));
  float2 sum = v.xy + w.zw;
  CHECK(equals(sum, 11, 11));
  CHECK(equals(v.yx * 2.0f, 6, 8));
  CHECK(v.zw[1] == 1.0f);
  float3 three(1, 2, 3);
  three.zx = three.xz;
  CHECK(equals(three, 3, 2, 1));
  packed_float3 packed(1, 2, 3);
  packed.yz = packed.zy;
  CHECK(equals(packed, 1, 3, 2));
  int2 i2(5, 6);
  i2.yx = i2;
  CHECK(equals(i2, 6, 5));
  half4 h(1, 2, 3, 4);
  h.xw = h.wx;
  CHECK(equals(h, 4, 2, 3, 1));
}

void constructors() {
  const float4 a(1, 2, 3, 4);
  CHECK(equals(float4(a.xy, 7, 8), 1, 2, 7, 8));
  CHECK(equals(float4(9, a.yz, 0), 9, 2, 3, 0));
  CHECK(equals(float4(a.xy, a.zw), 1, 2, 3, 4));
  CHECK(equals(float3(float2(1, 2), 3), 1, 2, 3));
  CHECK(equals(float4(float3(1, 2, 3), 4), 1, 2, 3, 4));
  float4 partial = {1, 2};
  CHECK(equals(partial, 1, 2, 0, 0));
  float4 first_only = {1};  // brace initialization is not a splat
  CHECK(equals(first_only, 1, 0, 0, 0));
  const int i = -1, j = 7;
  uint2 converted = {i, j};  // converts like Metal, no narrowing error
  CHECK(equals(converted, 0xffffffffu, 7u));
  float4 mixed = {a.xy, 5};
  CHECK(equals(mixed, 1, 2, 5, 0));
  float4 copied{a};
  CHECK(equals(copied, 1, 2, 3, 4));
  float4 from_half{half4(1, 2, 3, 4)};
  CHECK(equals(from_half, 1, 2, 3, 4));
  float4 splat = 2.5f;
  CHECK(equals(splat, 2.5f, 2.5f, 2.5f, 2.5f));
  float4 zero = {};
  CHECK(equals(zero, 0, 0, 0, 0));
  CHECK(equals(int4(float4(1.9f, -1.9f, 2.5f, -0.5f)), 1, -1, 2, 0));
  CHECK(equals(uchar2(int2(257, -1)), 1, 255));
  CHECK(equals(half2(float2(1.0f, 65520.0f)), 1, __builtin_inff()));
  CHECK(equals(bfloat2(float2(1.0f, 3.0f)), 1, 3));
  packed_float4 packed = a;
  float4 unpacked = packed;
  CHECK(equals(unpacked, 1, 2, 3, 4));
  bfloat4 from_bfloat = bfloat4(bfloat(1.5f));
  CHECK(equals(from_bfloat, 1.5f, 1.5f, 1.5f, 1.5f));
  long2 wide(1l << 40, -3);
  CHECK(wide.x == 1099511627776l && wide.y == -3);
}

void operators_and_relational() {
  const float4 a(1, -2, 3, -4), b(2, 2, 2, 2);
  CHECK(equals(a + b, 3, 0, 5, -2));
  CHECK(equals(a - 1.0f, 0, -3, 2, -5));
  CHECK(equals(2.0f * a, 2, -4, 6, -8));
  CHECK(equals(a / b, 0.5f, -1, 1.5f, -2));
  CHECK(equals(-a, -1, 2, -3, 4));
  const bool4 greater = a > b;
  CHECK(equals(greater, false, false, true, false));
  CHECK(any(greater) && !all(greater) && all(a == a) && !any(a != a));
  CHECK(equals(a <= 1.0f, true, true, false, true));
  CHECK(equals(!greater, true, true, false, true));
  CHECK(equals(greater || (a < 0.0f), false, true, true, true));
  CHECK(equals(greater && (a > 0.0f), false, false, true, false));
  CHECK(equals(select(a, b, a < 0.0f), 1, 2, 3, 2));
  CHECK(select(1.0f, 2.0f, true) == 2.0f && select(1, 2, false) == 1);
  CHECK(equals(select(int3(1, 2, 3), int3(7), bool3(true, false, true)), 7, 2, 7));
  CHECK(equals(select(a, b, true), 2, 2, 2, 2) && equals(select(a.xy, b.zw, false), 1, -2));
  uchar4 bytes(250, 3, 128, 0);
  CHECK(equals(bytes + uchar4(10), 4, 13, 138, 10));
  CHECK(equals(bytes >> 1, 125, 1, 64, 0));
  CHECK(equals(uint2(1, 3) << 4u, 16, 48));
  CHECK(equals(int4(7, -7, 9, 10) % 4, 3, -3, 1, 2));
  CHECK(equals(~uint2(0u, 0xffu), 0xffffffffu, 0xffffff00u));
  CHECK(equals(uint2(0xf0u, 0x0fu) & 0x3cu, 0x30u, 0x0cu));
  float4 accumulate(1);
  accumulate += a;
  accumulate *= 2.0f;
  CHECK(equals(accumulate, 4, -2, 8, -6));
  int2 counter(1, 2);
  ++counter;
  CHECK(equals(counter, 2, 3));
  half2 h(half(1.0f), half(2048.0f));
  h = h + half(1.0f);  // 2049 is not a half: rounds to even (2048)
  CHECK(equals(h, 2, 2048));
}

void scalar_arithmetic() {
  // half arithmetic rounds every operation to half.
  CHECK(float(half(1.0f) + half(0x1p-11f)) == 1.0f);
  CHECK(float(half(1.0f) + half(0x1.8p-11f)) == 1.0f + 0x1p-10f);
  CHECK(float(half(65504.0f) * half(2.0f)) == __builtin_inff());
  // bfloat: round to nearest even, ties, NaN stays NaN, overflow to infinity.
  CHECK(bfloat(1.0f + 0x1p-8f).bits == 0x3f80);       // tie -> even (down)
  CHECK(bfloat(1.0f + 0x1.8p-7f).bits == 0x3f82);     // tie -> even (up)
  CHECK(bfloat(1.0f + 0x1.01p-8f).bits == 0x3f81);    // above the tie
  CHECK(bfloat(-__builtin_inff()).bits == 0xff80);
  CHECK(bfloat(0x1.ffp127f).bits == 0x7f80);          // rounds past the largest finite
  CHECK(__builtin_isnan(float(bfloat(__builtin_nanf("")))));
  CHECK(float(bfloat(3) * bfloat(5)) == 15.0f && float(-bfloat(2.0f)) == -2.0f);
  bfloat counter = 1.0f;
  counter += 2.0f;
  ++counter;
  CHECK(float(counter) == 4.0f);
  CHECK(bfloat(0.1f) < 0.2f && bfloat(2) > bfloat(1) && bfloat(2) == 2.0f);
}

void integer_functions() {
  CHECK(clz(1u) == 31u && clz(uchar(1)) == 7 && clz(0) == 32 && clz(-1) == 0 && clz(ushort(0x00f0)) == 8);
  CHECK(clz(1ul) == 63ul && ctz(0u) == 32u && ctz(8) == 3 && ctz(long(1) << 40) == 40);
  CHECK(popcount(0xf0f0u) == 8u && popcount(-1) == 32 && popcount(char(-1)) == 8);
  CHECK(equals(clz(uint2(1u, 0x80000000u)), 31, 0));
  CHECK(mulhi(0x10000000, 0x100) == 0x10 && mulhi(-2, 3) == -1 && mulhi(0xffffffffu, 0xffffffffu) == 0xfffffffeu);
  CHECK(mulhi(ulong(1) << 63, ulong(4)) == 2ul && mulhi(long(-1), long(1)) == -1l);
  CHECK(absdiff(3, -5) == 8 && absdiff(uchar(200), uchar(10)) == 190 && absdiff(10u, 250u) == 240u);
  CHECK(addsat(char(100), char(100)) == 127 && addsat(char(-100), char(-100)) == -128);
  CHECK(addsat(uchar(200), uchar(100)) == 255 && addsat(2147483647, 1) == 2147483647);
  CHECK(subsat(uchar(5), uchar(9)) == 0 && subsat(-2147483647 - 1, 1) == -2147483647 - 1 && subsat(10, 3) == 7);
  CHECK(equals(addsat(ushort2(65535, 1), ushort2(1, 1)), 65535, 2));
  CHECK(rotate(0x80000001u, 1u) == 0x00000003u && rotate(uchar(0x81), uchar(4)) == 0x18 && rotate(1u, 33u) == 2u);
  CHECK(extract_bits(0xabcd1234u, 8u, 12u) == 0xd12u && extract_bits(int(0x00000f00), 8u, 4u) == -1);
  CHECK(extract_bits(int(0x00000700), 8u, 4u) == 7 && extract_bits(0xffu, 0u, 0u) == 0u);
  CHECK(insert_bits(0xffffffffu, 0u, 4u, 8u) == 0xfffff00fu && insert_bits(0u, 0x1ffu, 28u, 4u) == 0xf0000000u);
  CHECK(hadd(2147483647, 2147483647) == 2147483647 && hadd(-3, 0) == -2 && rhadd(1u, 2u) == 2u && hadd(1u, 2u) == 1u);
  CHECK(mul24(0x01000003, 2) == 6 && mul24(0x00ffffff, 1) == -1 && mul24(0x00ffffffu, 2u) == 0x01fffffeu);
  CHECK(mad24(3, 4, 5) == 17 && madhi(0x10000000, 0x100, 1) == 0x11);
  CHECK(madsat(100000, 100000, 1) == 2147483647 && madsat(uchar(16), uchar(16), uchar(0)) == 255);
  CHECK(reverse_bits(1u) == 0x80000000u && reverse_bits(uchar(0x0f)) == 0xf0 && reverse_bits(0x12345678u) == 0x1e6a2c48u);
  CHECK(metal::abs(-5) == 5 && metal::abs(-2147483647 - 1) == -2147483647 - 1 && metal::abs(7u) == 7u);
  CHECK(metal::min(3, -2) == -2 && metal::max(3u, 9u) == 9u && metal::clamp(15, 0, 10) == 10);
  CHECK(min3(4, 1, 3) == 1 && max3(4, 1, 3) == 4 && median3(4, 1, 3) == 3 && median3(1u, 1u, 0u) == 1u);
  CHECK(equals(metal::clamp(int3(-5, 5, 50), 0, 10), 0, 5, 10));
  CHECK(equals(metal::max(uint2(1, 8), uint2(4, 2)), 4, 8));
}

void as_type_and_float_functions() {
  CHECK(as_type<uint>(-2.0f) == 0xc0000000u);
  CHECK(as_type<float>(0x3f800000u) == 1.0f);
  const int2 halves = as_type<int2>(long(0x0000000700000003l));
  CHECK(halves.x == 3 && halves.y == 7);
  CHECK(as_type<long>(int2(3, 7)) == 0x0000000700000003l);
  const uchar4 bytes = as_type<uchar4>(0x04030201u);
  CHECK(equals(bytes, 1, 2, 3, 4));
  const half2 two_halves = as_type<half2>(0x3c003800u);
  CHECK(float(two_halves.x) == 0.5f && float(two_halves.y) == 1.0f);
  CHECK(as_type<ushort>(half(1.0f)) == 0x3c00 && as_type<ushort>(bfloat(1.0f)) == 0x3f80);
  CHECK(metal::fract(-0.25f) == 0.75f && metal::fract(-0x1p-30f) == 0x1.fffffep-1f);
  CHECK(metal::sign(-3.0f) == -1.0f && metal::sign(0.0f) == 0.0f && metal::sign(__builtin_nanf("")) == 0.0f);
  CHECK(metal::saturate(1.5f) == 1.0f && metal::saturate(-0.5f) == 0.0f);
  CHECK(metal::step(1.0f, 0.5f) == 0.0f && metal::step(1.0f, 1.0f) == 1.0f);
  CHECK(metal::mix(2.0f, 4.0f, 0.25f) == 2.5f && metal::smoothstep(0.0f, 2.0f, 1.0f) == 0.5f);
  CHECK(metal::fmin(1.0f, __builtin_nanf("")) == 1.0f && metal::max(__builtin_nanf(""), 2.0f) == 2.0f);
  CHECK(metal::clamp(5.0f, 0.0f, 1.0f) == 1.0f && metal::fmedian3(3.0f, 1.0f, 2.0f) == 2.0f);
  CHECK(metal::sinpi(1.0f) == 0.0f && metal::cospi(0.5f) == 0.0f && metal::sinpi(0.5f) == 1.0f && metal::cospi(1.0f) == -1.0f);
  CHECK(metal::powr(-1.0f, 2.0f) != metal::powr(-1.0f, 2.0f) && metal::pow(-2.0f, 2.0f) == 4.0f);
  CHECK(metal::ldexp(1.5f, 4) == 24.0f && equals(metal::ldexp(float2(1, 2), int2(1, 2)), 2, 8));
  int exponent = 0;
  CHECK(metal::frexp(8.0f, exponent) == 0.5f && exponent == 4);
  float whole = 0.0f;
  CHECK(metal::modf(-2.75f, whole) == -0.75f && whole == -2.0f);
  float cosine = 0.0f;
  CHECK(metal::sincos(0.0f, cosine) == 0.0f && cosine == 1.0f);
  float2 cosines;
  const float2 sines = metal::precise::sincos(float2(0.0f, 0.0f), cosines);
  CHECK(equals(sines, 0, 0) && equals(cosines, 1, 1));
  CHECK(metal::ilogb(8.0f) == 3 && metal::isnormal(1.0f) && !metal::isnormal(0x1p-130f));
  CHECK(metal::isunordered(1.0f, __builtin_nanf("")) && metal::isordered(1.0f, 2.0f) && metal::signbit(-0.0f));
  CHECK(equals(metal::isinf(float3(__builtin_inff(), 1.0f, -__builtin_inff())), true, false, true));
  CHECK(metal::dot(float3(1, 2, 3), float3(4, 5, 6)) == 32.0f && metal::length(float2(3, 4)) == 5.0f);
  CHECK(equals(metal::cross(float3(1, 0, 0), float3(0, 1, 0)), 0, 0, 1));
  CHECK(equals(metal::normalize(float2(0, 2)), 0, 1) && metal::distance(float2(1, 1), float2(4, 5)) == 5.0f);
  CHECK(equals(metal::reflect(float2(1, -1), float2(0, 1)), 1, 1));
  CHECK(equals(metal::abs(float4(-1, 2, -3, 0)), 1, 2, 3, 0) && equals(metal::fabs(half2(-1.0f, 2.0f)), 1, 2));
  CHECK(equals(metal::exp(float2(0.0f, 1.0f)).xy, 1.0f, M_E_F));
  CHECK(equals(metal::fmax(float2(1, 5), 3.0f), 3, 5) && equals(metal::min(float2(1, 5), float2(2, 2)), 1, 2));
  CHECK(metal::fma(2.0f, 3.0f, 1.0f) == 7.0f && float(metal::sqrt(half(4.0f))) == 2.0f && float(metal::exp2(bfloat(3.0f))) == 8.0f);
  CHECK(M_PI_F == 3.14159265358979323846f && float(M_PI_H) == float(half(3.14159265358979323846f)) && MAXHALF == half(65504.0f));
  CHECK(INFINITY == __builtin_inff() && NAN != NAN && HUGE_VALF == __builtin_inff() && FLT_MAX == 0x1.fffffep+127f);
}

}  // namespace

int main() {
  swizzles();
  constructors();
  operators_and_relational();
  scalar_arithmetic();
  integer_functions();
  as_type_and_float_functions();
  constexpr os_log log("com.etmetal.test", "stdlib");
  log.log_info("value %d of %.1f (%s)", 7, half(2.5f), "x");
  metal::array<int, 3> array = {1, 2, 3};
  CHECK(array.size() == 3 && array[2] == 3);
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
