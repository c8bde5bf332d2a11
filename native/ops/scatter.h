// scatter and scatter_reduce along one dimension as MSL kernels (shaders/indexing.metal),
// ATen semantics: out = self, then out[..., index[i], ...] (op)= src[i] for every element i of
// index. self, src and out of one dtype (float32, float16, bfloat16, int64, int32, int16, int8,
// uint8, bool), on mps with any strides, at most 9 dimensions; index int64 or int32 with self's
// number of dimensions, no larger than src anywhere and than self apart from `dim`. Reductions
// combine in index order (in the GPU shape, long lines of indices are sorted first, so that
// a thread takes each run of equal indices, in order: ops::sorted_form_wins). An index outside
// [0, self.size(dim)) poisons the stream once the kernel has run.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

// Must match the reduction codes in shaders/indexing.metal.
enum class ScatterReduction : uint32_t { assign = 0, sum = 1, prod = 2, mean = 3, amax = 4, amin = 5 };

// "sum", "prod", "mean", "amax" or "amin"; throws for any other name.
ScatterReduction scatter_reduction(const char* op, const char* name);

// `out` (self's shape and dtype; may be self itself) gets self, then src scattered into it.
// Without include_self, the elements index reaches start from the reduction's identity
// instead of self's values.
void scatter_into(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                  ScatterReduction reduction, bool include_self);

// scatter_into with every src element `value` (converted to self's dtype), no reduction.
void scatter_value_into(const Tensor& out, const Tensor& self, int64_t dim, const Tensor& index, double value);

// torch's index_reduce: a new contiguous copy of self with self[..., index[i], ...] (op)=
// source[..., i, ...] along dim; reduction prod, mean, amax or amin; index 1-D (int64 or
// int32) with source.size(dim) entries; source matches self apart from dim.
std::unique_ptr<Tensor> index_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                                     ScatterReduction reduction, bool include_self);

}  // namespace etm::ops
