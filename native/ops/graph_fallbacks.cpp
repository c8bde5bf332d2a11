#include "ops/graph_fallbacks.h"

#include <optional>
#include <string>

#include "runtime/dtype.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

using device::GraphLayout;
using device::GraphOperand;
using device::GraphWorkload;

std::optional<device::GraphDataType> graph_dtype(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::float32: return device::GraphDataType::float32;
    case DType::float16: return device::GraphDataType::float16;
    case DType::bfloat16: return device::GraphDataType::bfloat16;
    default: return std::nullopt;
  }
}

// The operand as the graph reads it: `sizes` and `strides` stand for the tensor's own where
// the caller reshapes it (a broadcast addend). Empty when the layout is not one it takes.
std::optional<GraphOperand> operand(const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                    bool may_swap_last_two) {
  const std::optional<device::GraphDataType> dtype = graph_dtype(t.dtype);
  if (!dtype || !t.storage || !t.storage->buffer) return std::nullopt;
  const GraphLayout layout = device::graph_layout(sizes, strides);
  if (layout == GraphLayout::other || (layout == GraphLayout::last_two_swapped && !may_swap_last_two))
    return std::nullopt;
  GraphOperand result;
  result.buffer = t.storage->buffer;
  result.offset = t.buffer_offset();
  result.sizes = std::move(sizes);
  result.strides = std::move(strides);
  result.dtype = *dtype;
  return result;
}

std::optional<GraphOperand> operand(const Tensor& t, bool may_swap_last_two) {
  return operand(t, t.sizes, t.strides, may_swap_last_two);
}

bool runs_graphs() { return Runtime::get().graph_fallbacks(); }

// MPSGraph does not promise when it reads an input relative to writing its result, so an
// output that shares bytes with an input (addmm into self) takes the kernel, which does.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.storage || !b.storage || a.storage->buffer != b.storage->buffer) return false;
  const size_t a_first = a.buffer_offset(), b_first = b.buffer_offset();
  return a_first < b_first + b.reach_bytes() && b_first < a_first + a.reach_bytes();
}

void encode(const GraphWorkload& workload, const char* name) {
  Runtime::get().current_stream().encode_graph(workload, name);
}

}  // namespace

bool encode_matmul_graph(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* addend,
                         const int64_t* addend_strides, double alpha, double beta) {
  if (!runs_graphs()) return false;
  GraphWorkload workload;
  workload.op = GraphWorkload::Op::matmul;
  workload.alpha = alpha;
  workload.beta = addend ? beta : 0.0;
  std::optional<GraphOperand> a_operand = operand(a, true);
  std::optional<GraphOperand> b_operand = operand(b, true);
  std::optional<GraphOperand> out_operand = operand(out, false);
  if (!a_operand || !b_operand || !out_operand) return false;
  workload.inputs = {std::move(*a_operand), std::move(*b_operand)};
  if (addend) {
    if (overlaps(out, *addend)) return false;
    // The addend at out's rank, broadcast dimensions of size 1 (MPSGraph broadcasts them).
    const size_t rank = out.sizes.size();
    std::vector<int64_t> sizes(rank), strides(rank);
    for (size_t d = 0; d < rank; ++d) {
      strides[d] = addend_strides[3 - rank + d];
      sizes[d] = strides[d] == 0 ? 1 : out.sizes[d];
    }
    std::optional<GraphOperand> addend_operand = operand(*addend, sizes, strides, false);
    if (!addend_operand) return false;
    workload.inputs.push_back(std::move(*addend_operand));
  }
  workload.output = std::move(*out_operand);
  encode(workload, a.dim() == 3 ? "mpsgraph_bmm" : "mpsgraph_mm");
  return true;
}

bool encode_convolution2d_graph(const Tensor& out, const Tensor& input, const Tensor& weight,
                                const Tensor* bias, const int64_t* stride, const int64_t* padding,
                                const int64_t* dilation, int64_t groups) {
  if (!runs_graphs()) return false;
  GraphWorkload workload;
  workload.op = GraphWorkload::Op::convolution2d;
  std::optional<GraphOperand> input_operand = operand(input, false);
  std::optional<GraphOperand> weight_operand = operand(weight, false);
  std::optional<GraphOperand> out_operand = operand(out, false);
  if (!input_operand || !weight_operand || !out_operand) return false;
  workload.inputs = {std::move(*input_operand), std::move(*weight_operand)};
  if (bias) {
    std::optional<GraphOperand> bias_operand = operand(*bias, false);
    if (!bias_operand) return false;
    workload.inputs.push_back(std::move(*bias_operand));
  }
  workload.output = std::move(*out_operand);
  for (int d = 0; d < 2; ++d) {
    workload.stride[d] = stride[d];
    workload.padding[d] = padding[d];
    workload.dilation[d] = dilation[d];
  }
  workload.groups = groups;
  encode(workload, "mpsgraph_conv2d");
  return true;
}

}  // namespace etm::ops
