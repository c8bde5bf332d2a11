// embedding_bag (ATen's _embedding_bag / _embedding_bag_forward_only) as an MSL kernel
// (shaders/indexing.metal), with the outputs and shapes of a GPU backend.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace etm::ops {

enum class EmbeddingBagMode : int64_t { sum = 0, mean = 1, max = 2 };

struct EmbeddingBagOutputs {
  std::unique_ptr<Tensor> output;       // [bags, features], weight's dtype
  std::unique_ptr<Tensor> offset2bag;   // [indices]: the bag of each index (0 outside every bag)
  std::unique_ptr<Tensor> bag_size;     // [offsets]: indices other than padding_idx per bag
  std::unique_ptr<Tensor> max_indices;  // max: [bags, features], the row chosen (-1: none); else [0]
};

// weight [rows, features] float32 / float16 / bfloat16; indices 1-D and offsets 1-D, int64 or
// int32 (the index outputs take indices' dtype); bag b starts at offsets[b] and ends where the
// next starts, the last at the end of indices (or at offsets[bags] with include_last_offset).
// Indices equal to padding_idx (negative: none) are skipped; per_sample_weights (sum only,
// weight's dtype, one per index) scale the rows. An index outside [0, rows) poisons the stream
// once the kernel has run.
EmbeddingBagOutputs embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                                  int64_t mode, const Tensor* per_sample_weights, bool include_last_offset,
                                  int64_t padding_idx);

}  // namespace etm::ops
