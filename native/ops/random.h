// Random-number ops as MSL kernels (shaders/random.metal) drawing from the process's default
// generator, with torch's generator semantics: a seed (torch's default until set), and an
// offset each call advances by the number of values it draws, so a sequence of calls after
// manual_seed(s) repeats exactly. Values come from Philox4x32-10 keyed by the seed, one
// counter per element; they are not bitwise torch's (the issue asks for torch's distributions,
// not its bits).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace etm::ops {

// Sets the default generator's seed and resets its offset.
void manual_seed(uint64_t seed);
uint64_t initial_seed();

// Fill `out` (float32, float16 or bfloat16; any strides) in place.
void fill_uniform(const Tensor& out, double from, double to);        // [from, to)
void fill_normal(const Tensor& out, double mean, double std);
void fill_exponential(const Tensor& out, double lambda);
// Integers in [low, high) into out (int64, int32, int16, int8, uint8, bool, or a float dtype).
void fill_random_int(const Tensor& out, int64_t low, int64_t high);
// 1 with probability p, else 0, into out (float, int64, int32, uint8 or bool): a scalar p, or
// the elements of `probabilities` (a float tensor broadcasting to out's shape) when given.
void fill_bernoulli(const Tensor& out, double p, const Tensor* probabilities);

}  // namespace etm::ops
