// metal::exp, exp2 and exp10 of float against long double expl, exp2l and exp10l over every
// `stride`-th float bit pattern (argv[1]), plus the special values. Output, per function:
// `<name> <largest error in ulps> <argument of it> <special-value mismatches>`.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <metal_stdlib>

namespace {

struct function {
  const char* name;
  float (*evaluate)(float);
  long double (*reference)(long double);
};

const function functions[] = {
    {"exp", [](float x) { return metal::exp(x); }, [](long double x) { return expl(x); }},
    {"exp2", [](float x) { return metal::exp2(x); }, [](long double x) { return exp2l(x); }},
    {"exp10", [](float x) { return metal::exp10(x); }, [](long double x) { return exp10l(x); }},
};

// The spacing of float at a finite float value (subnormal spacing below the normal range).
long double ulp_at(float value) {
  int exponent = 0;
  frexpl(fabsl((long double)value), &exponent);
  return ldexpl(1.0L, exponent - 24 > -149 ? exponent - 24 : -149);
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned long stride = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1;
  for (const function& f : functions) {
    double worst = 0.0;
    float worst_at = 0.0f;
    unsigned long special_mismatches = 0;
    for (unsigned long bits = 0; bits < (1ul << 32); bits += stride) {
      const float x = as_type<float>(uint32_t(bits));
      const float got = f.evaluate(x);
      if (std::isnan(x)) {
        special_mismatches += !std::isnan(got);
        continue;
      }
      const long double exact = f.reference(x);
      const float rounded = float(exact);
      // Overflow to inf and underflow to 0 must be exact; so must exp(0) = 1.
      if (std::isinf(rounded) || rounded == 0.0f || x == 0.0f) {
        special_mismatches += got != rounded;
        continue;
      }
      if (!std::isfinite(got)) {
        ++special_mismatches;
        continue;
      }
      const double error = double(fabsl((long double)got - exact) / ulp_at(rounded));
      if (error > worst) {
        worst = error;
        worst_at = x;
      }
    }
    std::printf("%s %.6f %a %lu\n", f.name, worst, worst_at, special_mismatches);
  }
  return 0;
}
