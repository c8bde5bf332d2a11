#include "ops/random.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/random.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "random.metal";
// torch's default seed (c10::default_rng_seed_val): a process that never seeds draws the same
// sequence each run, as with torch.
constexpr uint64_t kDefaultSeed = 67280421310721ULL;

class DefaultGenerator {
 public:
  void seed(uint64_t value) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = value;
    offset_ = 0;
  }
  uint64_t seed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seed_;
  }
  // (seed, first counter) of `count` fresh values.
  std::pair<uint64_t, uint64_t> reserve(uint64_t count) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t first = offset_;
    offset_ += count;
    return {seed_, first};
  }

 private:
  std::mutex mutex_;
  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
};

DefaultGenerator& generator() {
  static DefaultGenerator* instance = new DefaultGenerator;  // never destroyed, like the runtime
  return *instance;
}

// Parameters for out's elements; draws their counters from the generator.
RandomParams params_for(const char* op, const Tensor& out) {
  require_mps(op, "self", out);
  ETM_REQUIRE(out.dim() <= kRandomMaxDims, op, ": at most ", kRandomMaxDims, " dimensions are supported, not ", out.dim());
  RandomParams p{};
  p.dims = static_cast<uint32_t>(out.dim());
  p.numel = checked_u32(op, out.numel(), "number of elements");
  for (int64_t d = 0; d < out.dim(); ++d) {
    p.sizes[d] = checked_u32(op, out.sizes[d], "size");
    p.strides[d] = out.strides[d];
  }
  const auto [seed, offset] = generator().reserve(p.numel);
  p.seed = seed;
  p.offset = offset;
  return p;
}

const char* float_suffix(const char* op, const Tensor& out) {
  const char* suffix = msl_float_type_name(out.dtype);
  ETM_REQUIRE(suffix, op, ": dtype ", dtype_name(out.dtype), " is not supported (float32, float16, bfloat16)");
  return suffix;
}

void launch(const std::string& kernel, const Tensor& out, const RandomParams& p, const Tensor* probabilities) {
  if (p.numel == 0) return;
  KernelLaunch launch(shader_kernel(kShaderFile, kernel));
  const device::Size3 grid{p.numel, 1, 1};
  launch.tensor(0, out);
  if (kernel.rfind("random_bernoulli_", 0) == 0) {
    launch.tensor(1, probabilities ? *probabilities : out).value(2, p);
  } else {
    launch.value(1, p);
  }
  launch.threads(grid, default_group(grid, launch));
}

// The representable range of an integer output dtype, for randint's bounds check.
std::pair<int64_t, int64_t> integer_bounds(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::int64: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case DType::int32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::int16: return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case DType::int8: return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case DType::uint8: return {0, 255};
    case DType::bool_: return {0, 1};
    case DType::float32: return {-(int64_t{1} << 24), int64_t{1} << 24};
    case DType::float16: return {-(int64_t{1} << 11), int64_t{1} << 11};
    case DType::bfloat16: return {-(int64_t{1} << 8), int64_t{1} << 8};
    default:
      fail("randint: dtype ", dtype_name(dtype), " is not supported (int64, int32, int16, int8, uint8, bool, "
           "float32, float16, bfloat16)");
  }
}

}  // namespace

void manual_seed(uint64_t seed) { generator().seed(seed); }

uint64_t initial_seed() { return generator().seed(); }

void fill_uniform(const Tensor& out, double from, double to) {
  constexpr const char* op = "uniform";
  const char* suffix = float_suffix(op, out);
  ETM_REQUIRE(std::isfinite(from) && std::isfinite(to), op, ": from and to must be finite, got from=", from,
              " to=", to);
  ETM_REQUIRE(from <= to, op, ": expects to return a [from, to) range, but found from=", from, " > to=", to);
  RandomParams p = params_for(op, out);
  p.a = static_cast<float>(from);
  p.b = static_cast<float>(to);
  launch(std::string("random_uniform_") + suffix, out, p, nullptr);
}

void fill_normal(const Tensor& out, double mean, double std) {
  constexpr const char* op = "normal";
  const char* suffix = float_suffix(op, out);
  ETM_REQUIRE(std >= 0.0, op, ": expects std >= 0.0, but found std ", std);
  RandomParams p = params_for(op, out);
  p.a = static_cast<float>(mean);
  p.b = static_cast<float>(std);
  launch(std::string("random_normal_") + suffix, out, p, nullptr);
}

void fill_exponential(const Tensor& out, double lambda) {
  constexpr const char* op = "exponential";
  const char* suffix = float_suffix(op, out);
  ETM_REQUIRE(lambda > 0.0 && !std::isinf(lambda), op, ": expects lambda > 0.0, but found lambda=", lambda);
  RandomParams p = params_for(op, out);
  p.a = static_cast<float>(lambda);
  launch(std::string("random_exponential_") + suffix, out, p, nullptr);
}

void fill_random_int(const Tensor& out, int64_t low, int64_t high) {
  constexpr const char* op = "randint";
  const auto [lowest, highest] = integer_bounds(out.dtype);
  ETM_REQUIRE(low < high, op, ": random_ expects 'from' to be less than 'to', but got from=", low, " >= to=",
              high);
  ETM_REQUIRE(low >= lowest && low <= highest, op, ": from is out of bounds for ", dtype_name(out.dtype));
  ETM_REQUIRE(high - 1 <= highest, op, ": to - 1 is out of bounds for ", dtype_name(out.dtype));
  RandomParams p = params_for(op, out);
  p.low = low;
  p.range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  launch(std::string("random_int_") + msl_element_type_name(out.dtype), out, p, nullptr);
}

void fill_bernoulli(const Tensor& out, double probability, const Tensor* probabilities) {
  constexpr const char* op = "bernoulli";
  const char* out_suffix = msl_element_type_name(out.dtype);
  const bool supported = out_suffix && static_cast<DType>(out.dtype) != DType::int16 &&
                         static_cast<DType>(out.dtype) != DType::int8;
  ETM_REQUIRE(supported, op, ": dtype ", dtype_name(out.dtype),
              " is not supported (float32, float16, bfloat16, int64, int32, uint8, bool)");
  std::string p_suffix = "float";
  if (probabilities) {
    require_mps(op, "p", *probabilities);
    const char* suffix = msl_float_type_name(probabilities->dtype);
    ETM_REQUIRE(suffix, op, ": p must be a float32, float16 or bfloat16 tensor, not ",
                dtype_name(probabilities->dtype));
    p_suffix = suffix;
  } else {
    ETM_REQUIRE(probability >= 0.0 && probability <= 1.0, op, ": expects p to be in [0, 1], but got p=",
                probability);
  }
  RandomParams p = params_for(op, out);
  p.a = static_cast<float>(probability);
  p.has_p_tensor = probabilities ? 1 : 0;
  if (probabilities) {
    // p broadcasts to self's shape: trailing dims aligned, stride 0 along p's size-1 dims.
    const int64_t lead = out.dim() - probabilities->dim();
    ETM_REQUIRE(lead >= 0, op, ": p of shape ", shape_text(probabilities->sizes), " does not broadcast to self's ",
                shape_text(out.sizes));
    for (int64_t d = 0; d < probabilities->dim(); ++d) {
      const int64_t size = probabilities->sizes[d];
      ETM_REQUIRE(size == out.sizes[lead + d] || size == 1, op, ": p of shape ", shape_text(probabilities->sizes),
                  " does not broadcast to self's ", shape_text(out.sizes));
      p.p_strides[lead + d] = size == 1 ? 0 : probabilities->strides[d];
    }
  }
  launch(std::string("random_bernoulli_") + out_suffix + "_" + p_suffix, out, p, probabilities);
}

}  // namespace etm::ops
