// Helpers shared by the ops' host code: MSL type names of dtypes, argument checks whose
// messages name the op, narrowing of sizes into the kernels' 32-bit parameters, and
// threadgroup shaping.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/device.h"
#include "ops/kernel_launch.h"
#include "params/lines.h"
#include "runtime/tensor.h"

namespace etm::ops {

// The largest extent the kernels' int32 size parameters hold (quantized and recurrent ops).
constexpr int64_t kMaxInt32Extent = (int64_t{1} << 31) - 1;

// MSL scalar type of a floating dtype ("float", "half", "bfloat"); nullptr for any other.
// Kernel instances are named by the MSL types they take: "matmul_naive_half".
const char* msl_float_type_name(int32_t dtype);

// MSL scalar type of a floating, signed integer, uint8 or bool dtype ("long", "uchar" ...);
// nullptr for any other.
const char* msl_element_type_name(int32_t dtype);

// "[2, 3, 4]".
std::string shape_text(const std::vector<int64_t>& sizes);

// A view of `base`'s storage with other sizes and strides, `offset` elements further on (no
// checks: the caller keeps it within base's storage).
Tensor strided_view(const Tensor& base, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                    int64_t offset = 0);

// `value` as a kernel's uint32 parameter; throws "<op>: <what> <value> exceeds the kernels'
// 32-bit range" unless it fits.
uint32_t checked_u32(const char* op, int64_t value, const char* what);

// `dim` wrapped into [0, n) (a 0-D tensor counts as 1-D, as torch does); throws unless it is in
// [-n, n).
int64_t wrap_dim(const char* op, int64_t dim, int64_t n);

// Where pack_outer_dims writes one tensor's strides.
struct OuterStrides {
  const std::vector<int64_t>& strides;
  int64_t* into;
};

// Packs the dimensions of `sizes` other than `dim` (the outer dimensions of a line-wise op's
// lines) into a kernel's parameter arrays, in order: their sizes into `outer_sizes` (each
// checked to fit 32 bits) and, for each OuterStrides, the matching strides. Returns how many
// there are; `lines` gets their product.
uint32_t pack_outer_dims(const char* op, const std::vector<int64_t>& sizes, int64_t dim,
                         std::initializer_list<OuterStrides> strides, uint32_t* outer_sizes,
                         int64_t& lines);

// Wraps `dim` (in place), checks self's number of dimensions and fills `layout` for the lines
// of self along dim and outputs with `out_strides` (both outputs). Returns the number of lines,
// 0 when there is no element (a zero length).
int64_t lay_out_lines(const char* op, const Tensor& self, int64_t& dim, const std::vector<int64_t>& out_strides,
                      LineLayout& layout);

// A threadgroup of at most `limit` threads over a 3-D grid, x fastest.
device::Size3 group_for(const device::Size3& grid, uint64_t limit);

// group_for with the limit the ops use by default: 256 threads, or fewer when the launch's
// kernel allows fewer.
device::Size3 default_group(const device::Size3& grid, const KernelLaunch& launch);

// Which launch shape ops take where the best one differs by device. On a GPU, long lines and
// large windows go to a cooperating threadgroup each: thousands of threads in flight hide
// memory latency, and each byte is read once. On the CPU device a threadgroup runs on one core,
// so cooperation buys no parallelism and costs barriers (fiber switches or barrier regions):
// one thread walking a line is fastest there. ETMETAL_OP_SHAPES forces one shape on any device
// (tests run the GPU shapes on the CPU device with it); it is read at each call.
enum class LaunchShape { gpu, cpu };
LaunchShape launch_shape();

// Whether an accumulation (index_put with accumulate, scatter_reduce) should take its sorted
// form: sort the indices, then a thread per run of equal ones, in order. The alternative walks:
// `walkers` threads each combine `walk` index positions in order. The walk reads every operand
// once (kernel_report: about 1.2x the minimum bytes; the sorted form 1.6x to 5.4x), so it is
// kept on the CPU shape, for short walks (< 64), and for walks under 1024 with at least 16 K
// walkers, which fill a GPU.
bool sorted_form_wins(uint64_t walk, uint64_t walkers);

// Throws "<op>: <name> must be an mps tensor (device type N)" unless t is on the mps device.
void require_mps(const char* op, const char* name, const Tensor& t);

// float32, float16 or bfloat16.
bool is_floating(int32_t dtype);

// The output dtype of cumsum / cumprod (torch's rule: a requested dtype, else floating inputs
// keep theirs and integer / bool inputs give int64); throws for pairs the kernels lack.
int32_t scan_output_dtype(const char* op, const Tensor& self, std::optional<int32_t> dtype);

// A kernel's fault record, int32 [fault number + 1 (0: none), low and high words of an int64
// value], zeroed on the calling thread's stream before the kernel runs.
std::shared_ptr<Tensor> new_fault_record();
struct Fault {
  int32_t number;  // -1: nothing was recorded
  int64_t value;
};
// What the kernel recorded; read it once the kernel has run (in a completion check).
Fault read_fault_record(const Tensor& record);

// Throws unless t is on the mps device and floating (float32, float16 or bfloat16).
void require_float_operand(const char* op, const char* name, const Tensor& t);

// MSL name of a floating activation dtype ("float", "half", "bfloat"); throws for others.
const char* activation_type_name(const char* op, const char* what, const Tensor& t);
// Throws unless t lives on the mps device and has `dim` dimensions.
void require_device_tensor(const char* op, const char* what, const Tensor& t, int64_t dim);
// Group sizes the quantized kernels implement: 32, 64, 128, 256.
bool is_supported_group_size(int64_t group_size);

// The strides (in elements) torch's TensorIterator gives the new output of a pointwise op over
// `shape`: contiguous in the order of the operands' strides (each operand's strides broadcast to
// `shape`, 0 where it broadcasts; the first operand decides, later ones break its ties), so a
// transposed input gives a transposed output. Compiled models index the output with the
// strides torch's meta function computed, which are these.
std::vector<int64_t> pointwise_output_strides(const std::vector<int64_t>& shape,
                                              std::initializer_list<const int64_t*> operand_strides);

// The dimensions ordered by decreasing stride: walking a shape in this order (last fastest)
// visits an output with pointwise_output_strides in memory order.
std::vector<size_t> dims_by_decreasing_stride(const std::vector<int64_t>& strides);

}  // namespace etm::ops
