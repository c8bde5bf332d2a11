#include "ops/selection.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/selection.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

constexpr const char* kShaderFile = "selection.metal";
// repeat_interleave: the repeats one thread counts and writes (each chunk's count is scanned:
// 8 bytes of counts per chunk, small beside 64 repeats).
constexpr uint32_t kRepeatChunk = 64;

// `chunk`: the elements a counting pass takes together (kSelectionBlock: a threadgroup's
// block of flags; kRepeatChunk).
SelectionParams layout(const char* op, const Tensor& t, uint32_t chunk) {
  ETM_REQUIRE(t.dim() <= kSelectionMaxDims, op, ": at most ", kSelectionMaxDims, " dimensions are supported, not ", t.dim());
  SelectionParams p{};
  p.dims = static_cast<uint32_t>(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) {
    p.sizes[d] = checked_u32(op, t.sizes[d], "size");
    p.strides[d] = t.strides[d];
  }
  p.numel = checked_u32(op, t.numel(), "number of elements");
  p.chunk = chunk;
  p.chunks = static_cast<uint32_t>((uint64_t{p.numel} + chunk - 1) / chunk);
  return p;
}

void dispatch_1d(KernelLaunch& launch, uint64_t threads) {
  if (threads == 0) return;
  const device::Size3 grid{threads, 1, 1};
  launch.threads(grid, default_group(grid, launch));
}

// One threadgroup per block of kSelectionBlock elements.
void dispatch_blocks(KernelLaunch& launch, uint32_t blocks) {
  if (blocks != 0) launch.threadgroups({blocks, 1, 1}, {kSelectionGroupThreads, 1, 1});
}

// counts[c] becomes chunk c's first row, counts[chunks] the total.
void scan_chunk_counts(const Tensor& counts, uint32_t chunks) {
  SelectionParams scan{};
  scan.chunks = chunks;
  KernelLaunch launch(shader_kernel(kShaderFile, "exclusive_scan"));
  launch.tensor(0, counts).value(1, scan).threadgroups({1, 1, 1}, {kSelectionScanThreads, 1, 1});
}

// The per-block row counts (then first rows, after the scan) and the words of flags of a
// flagging pass.
struct ChunkRows {
  std::shared_ptr<Tensor> counts;
  std::shared_ptr<Tensor> words;
};

// Runs the flagging pass `count_kernel` (binds (input, counts, words, params)) and the scan.
template <typename Params>
ChunkRows flag_chunks(const std::string& count_kernel, const Tensor& input, const Params& p) {
  Runtime& runtime = Runtime::get();
  ChunkRows rows;
  rows.counts = runtime.empty_tensor({int64_t{p.chunks} + 1}, {1}, static_cast<int32_t>(DType::int64));
  rows.words = runtime.empty_tensor({std::max<int64_t>((int64_t{p.numel} + 31) / 32, 1)}, {1},
                                    static_cast<int32_t>(DType::int32));
  KernelLaunch launch(shader_kernel(kShaderFile, count_kernel));
  launch.tensor(0, input).tensor(1, *rows.counts).tensor(2, *rows.words).value(3, p);
  dispatch_blocks(launch, p.chunks);
  scan_chunk_counts(*rows.counts, p.chunks);
  return rows;
}

int64_t read_total(const char* op, const Tensor& counts, uint32_t chunks, int64_t limit) {
  Runtime::get().current_stream().wait_idle();
  const int64_t total = reinterpret_cast<const int64_t*>(counts.data())[chunks];
  ETM_REQUIRE(total >= 0 && total <= limit, op, ": the device returned an invalid count ", total,
              " (an earlier failure on this stream?)");
  return total;
}

std::unique_ptr<Tensor> nonzero_rows(const char* op, const Tensor& self, std::optional<int64_t> size,
                                     int64_t fill_value) {
  require_mps(op, "self", self);
  const char* name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(name, op, ": input dtype ", dtype_name(self.dtype), " is not supported");
  SelectionParams p = layout(op, self, kSelectionBlock);
  p.fill_value = fill_value;
  const ChunkRows flags = flag_chunks(std::string("nonzero_chunk_counts_") + name, self, p);
  p.rows = size ? *size : read_total(op, *flags.counts, p.chunks, p.numel);
  const int64_t dims = self.dim();
  auto out = Runtime::get().empty_tensor({p.rows, dims}, {dims, 1}, static_cast<int32_t>(DType::int64));
  if (p.rows == 0 || dims == 0) return out;
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "nonzero_write"));
    launch.tensor(0, *flags.words).tensor(1, *flags.counts).tensor(2, *out).value(3, p);
    dispatch_blocks(launch, p.chunks);
  }
  if (size) {
    KernelLaunch launch(shader_kernel(kShaderFile, "nonzero_fill"));
    launch.tensor(0, *flags.counts).tensor(1, *out).value(2, p);
    dispatch_1d(launch, static_cast<uint64_t>(p.rows * dims));
  }
  return out;
}

// Checks self and mask of masked_select / masked_scatter; returns self's MSL type name.
const char* check_masked_operands(const char* op, const Tensor& self, const Tensor& mask) {
  require_mps(op, "self", self);
  require_mps(op, "mask", mask);
  const char* name = msl_element_type_name(self.dtype);
  ETM_REQUIRE(name, op, ": input dtype ", dtype_name(self.dtype), " is not supported");
  ETM_REQUIRE(mask.dtype == static_cast<int32_t>(DType::bool_), op, ": expected BoolTensor for mask, got ",
              dtype_name(mask.dtype));
  return name;
}

// self and mask broadcast to one shape, aligned at the last dimension.
MaskedParams masked_layout(const char* op, const Tensor& self, const Tensor& mask) {
  const int64_t dims = std::max(self.dim(), mask.dim());
  ETM_REQUIRE(dims <= kSelectionMaxDims, op, ": at most ", kSelectionMaxDims, " dimensions are supported, not ", dims);
  MaskedParams p{};
  p.dims = static_cast<uint32_t>(dims);
  int64_t numel = 1;
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t si = d - (dims - self.dim()), mi = d - (dims - mask.dim());
    const int64_t s_size = si >= 0 ? self.sizes[si] : 1, m_size = mi >= 0 ? mask.sizes[mi] : 1;
    ETM_REQUIRE(s_size == m_size || s_size == 1 || m_size == 1, op, ": the size of tensor a (", s_size,
                ") must match the size of tensor b (", m_size, ") at non-singleton dimension ", d);
    const int64_t size = s_size == 1 ? m_size : s_size;
    p.sizes[d] = checked_u32(op, size, "size");
    p.self_strides[d] = s_size == 1 ? 0 : self.strides[si];
    p.mask_strides[d] = m_size == 1 ? 0 : mask.strides[mi];
    numel *= size;
  }
  p.numel = checked_u32(op, numel, "number of elements");
  p.chunk = kSelectionBlock;
  p.chunks = static_cast<uint32_t>((uint64_t{p.numel} + kSelectionBlock - 1) / kSelectionBlock);
  return p;
}

}  // namespace

std::unique_ptr<Tensor> nonzero(const Tensor& self) { return nonzero_rows("nonzero", self, std::nullopt, 0); }

std::unique_ptr<Tensor> nonzero_static(const Tensor& self, int64_t size, int64_t fill_value) {
  ETM_REQUIRE(size >= 0, "nonzero_static: 'size' must be an non-negative integer, got ", size);
  return nonzero_rows("nonzero_static", self, size, fill_value);
}

std::unique_ptr<Tensor> masked_select(const Tensor& self, const Tensor& mask) {
  constexpr const char* op = "masked_select";
  const char* name = check_masked_operands(op, self, mask);
  MaskedParams p = masked_layout(op, self, mask);
  const ChunkRows flags = flag_chunks("masked_chunk_counts", mask, p);
  p.rows = read_total(op, *flags.counts, p.chunks, p.numel);
  auto out = Runtime::get().empty_tensor({p.rows}, {1}, self.dtype);
  if (p.rows == 0) return out;
  KernelLaunch launch(shader_kernel(kShaderFile, std::string("masked_write_") + name));
  launch.tensor(0, self).tensor(1, *flags.words).tensor(2, *flags.counts).tensor(3, *out).value(4, p);
  dispatch_blocks(launch, p.chunks);
  return out;
}

std::unique_ptr<Tensor> masked_scatter(const Tensor& self, const Tensor& mask, const Tensor& source) {
  constexpr const char* op = "masked_scatter";
  const char* name = check_masked_operands(op, self, mask);
  require_mps(op, "source", source);
  ETM_REQUIRE(source.dtype == self.dtype, op, ": expected self and source to have same dtypes but got ",
              dtype_name(self.dtype), " and ", dtype_name(source.dtype));
  MaskedParams p = masked_layout(op, self, mask);
  std::vector<int64_t> out_sizes(p.sizes, p.sizes + p.dims);
  auto out = Runtime::get().empty_tensor(out_sizes, contiguous_strides(out_sizes), self.dtype);
  if (p.numel == 0) return out;
  const SelectionParams source_layout = layout(op, source, kSelectionBlock);
  const ChunkRows flags = flag_chunks("masked_chunk_counts", mask, p);
  std::shared_ptr<Tensor> counts = flags.counts;
  KernelLaunch launch(shader_kernel(kShaderFile, std::string("masked_scatter_write_") + name));
  launch.tensor(0, self).tensor(1, *flags.words).tensor(2, *counts).tensor(3, *out)
      .tensor(4, source.numel() ? source : self).value(5, p).value(6, source_layout);
  const int64_t available = source.numel();
  const uint32_t chunks = p.chunks;
  launch.completion_check([counts, chunks, available]() -> std::string {
    const int64_t needed = reinterpret_cast<const int64_t*>(counts->data())[chunks];
    if (needed <= available) return {};
    return concat("masked_scatter: Number of elements of source < number of ones in mask (", available, " < ",
                  needed, ")");
  });
  dispatch_blocks(launch, p.chunks);
  return out;
}

std::unique_ptr<Tensor> repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size) {
  constexpr const char* op = "repeat_interleave";
  require_mps(op, "repeats", repeats);
  ETM_REQUIRE(repeats.dim() == 1, op, ": repeats must be a 1-D tensor, got ", repeats.dim(), " dimensions");
  const bool is_long = repeats.dtype == static_cast<int32_t>(DType::int64);
  ETM_REQUIRE(is_long || repeats.dtype == static_cast<int32_t>(DType::int32), op,
              ": repeats has to be Long or Int tensor, got ", dtype_name(repeats.dtype));
  if (output_size) ETM_REQUIRE(*output_size >= 0, op, ": output_size must be >= 0, got ", *output_size);
  const std::string name = is_long ? "long" : "int";
  Runtime& runtime = Runtime::get();
  SelectionParams p = layout(op, repeats, kRepeatChunk);
  std::shared_ptr<Tensor> negative = runtime.empty_tensor({1}, {1}, static_cast<int32_t>(DType::int32));
  runtime.current_stream().fill_buffer(negative->storage->buffer, negative->buffer_offset(), 4, 0);
  std::shared_ptr<Tensor> counts =
      runtime.empty_tensor({int64_t{p.chunks} + 1}, {1}, static_cast<int32_t>(DType::int64));
  {
    KernelLaunch launch(shader_kernel(kShaderFile, "repeat_chunk_counts_" + name));
    launch.tensor(0, repeats).tensor(1, *counts).tensor(2, *negative).value(3, p);
    dispatch_1d(launch, p.chunks);
  }
  scan_chunk_counts(*counts, p.chunks);
  if (output_size) {
    ETM_REQUIRE(p.numel > 0 || *output_size == 0, op, ": allocated size does not match required size "
                "(output_size ", *output_size, ", no repeats)");
    p.rows = *output_size;
  } else {
    // Any int64 total fits the output's indexing; the repeats themselves bound it.
    p.rows = read_total(op, *counts, p.chunks, INT64_MAX);
    ETM_REQUIRE(*reinterpret_cast<const int32_t*>(negative->data()) == 0, op, ": repeats can not be negative");
  }
  auto out = runtime.empty_tensor({p.rows}, {1}, repeats.dtype);
  KernelLaunch launch(shader_kernel(kShaderFile, "repeat_write_" + name));
  // An empty output has no buffer; the kernel writes no row then, so any buffer will do.
  launch.tensor(0, repeats).tensor(1, *counts).tensor(2, p.rows ? *out : *counts).value(3, p);
  if (output_size) {
    const int64_t expected = *output_size;
    const uint32_t chunks = p.chunks;
    launch.completion_check([negative, counts, expected, chunks]() -> std::string {
      if (*reinterpret_cast<const int32_t*>(negative->data()) != 0) {
        return "repeat_interleave: repeats can not be negative";
      }
      const int64_t total = reinterpret_cast<const int64_t*>(counts->data())[chunks];
      if (total != expected) {
        return "repeat_interleave: allocated size does not match required size (output_size " +
               std::to_string(expected) + ", repeats sum to " + std::to_string(total) + ")";
      }
      return {};
    });
  }
  dispatch_1d(launch, p.chunks);
  return out;
}

}  // namespace etm::ops
