#include "ops/gather_qmv.h"

#include <cstring>
#include <string>

#include "ops/kernel_launch.h"
#include "ops/op_support.h"
#include "ops/shader_kernels.h"
#include "params/gather_qmv.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/runtime.h"

namespace etm::ops {
namespace {

// Must match the constants of shaders/gather_qmv.metal: threadgroups of kSimdgroups
// simdgroups x 4 output rows.
constexpr uint64_t kSimdgroups = 8;
constexpr int64_t kRowsPerGroup = 4 * kSimdgroups;

}  // namespace

std::unique_ptr<Tensor> gather_qmv(const Tensor& x, const Tensor& w, const Tensor& scales,
                                   const Tensor& biases, const Tensor& indices,
                                   int64_t group_size) {
  constexpr const char* op = "gather_qmv";
  require_device_tensor(op, "X", x, 2);
  const char* type_name = activation_type_name(op, "X", x);
  const int64_t P = x.sizes[0], K = x.sizes[1];
  ETM_REQUIRE(P <= kMaxInt32Extent && K <= kMaxInt32Extent, op, ": X is too large: ", P, " x ", K);
  ETM_REQUIRE(K > 0 && K % 8 == 0, op, ": K (X.size(1)) must be a positive multiple of 8, got ", K);
  ETM_REQUIRE(is_supported_group_size(group_size), op, ": ",
              "group_size must be 32, 64, 128 or 256, got ", group_size);
  require_device_tensor(op, "W", w, 3);
  ETM_REQUIRE(w.dtype == static_cast<int32_t>(DType::uint8), op, ": W must be uint8, got ",
              dtype_name(w.dtype));
  const int64_t E = w.sizes[0], N = w.sizes[1];
  ETM_REQUIRE(E <= kMaxInt32Extent && N <= kMaxInt32Extent, op, ": W is too large");
  ETM_REQUIRE(w.sizes[2] * 2 == K, op, ": W must have K / 2 = ", K / 2, " bytes per row, got ",
              w.sizes[2]);
  ETM_REQUIRE(w.strides[2] == 1, op, ": W must be contiguous along its last dimension");
  const int64_t groups = (K + group_size - 1) / group_size;
  using Named = std::pair<const char*, const Tensor*>;
  for (const auto& [what, t] : {Named{"S", &scales}, Named{"Z", &biases}}) {
    require_device_tensor(op, what, *t, 3);
    ETM_REQUIRE(t->dtype == x.dtype, op, ": ", what, " must have X's dtype ", dtype_name(x.dtype), ", got ",
                dtype_name(t->dtype));
    ETM_REQUIRE(t->sizes[0] == E && t->sizes[1] == N && t->sizes[2] == groups, op, ": ", what,
                " must have shape [", E, ", ", N, ", ", groups, "], got [", t->sizes[0], ", ",
                t->sizes[1], ", ", t->sizes[2], "]");
  }
  require_device_tensor(op, "ExpertIndices", indices, 1);
  const bool wide = indices.dtype == static_cast<int32_t>(DType::int64);
  ETM_REQUIRE(wide || indices.dtype == static_cast<int32_t>(DType::int32), op, ": ",
              "ExpertIndices must be int32 or int64, got ", dtype_name(indices.dtype));
  ETM_REQUIRE(indices.sizes[0] == P, op, ": ExpertIndices must have P = ", P, " elements, got ",
              indices.sizes[0]);

  auto out = Runtime::get().empty_tensor({P, N}, {N, 1}, x.dtype);
  if (P == 0 || N == 0) return out;
  ETM_REQUIRE(E > 0, op, ": W holds no experts, but ", P, " pairs index it");
  GatherQmvParams params{};
  params.P = static_cast<int32_t>(P);
  params.N = static_cast<int32_t>(N);
  params.K = static_cast<int32_t>(K);
  params.E = static_cast<int32_t>(E);
  params.group_size = static_cast<int32_t>(group_size);
  params.x_stride_p = x.strides[0];
  params.x_stride_k = x.strides[1];
  params.index_stride = indices.strides[0];
  params.w_stride_e = w.strides[0];
  params.w_stride_n = w.strides[1];
  params.scale_stride_e = scales.strides[0];
  params.scale_stride_n = scales.strides[1];
  params.scale_stride_g = scales.strides[2];
  params.bias_stride_e = biases.strides[0];
  params.bias_stride_n = biases.strides[1];
  params.bias_stride_g = biases.strides[2];
  const std::string name = std::string("gather_qmv_") + type_name + (wide ? "_long" : "_int");
  // The kernel records the first out-of-range index here; the stream reports it.
  auto fault = Runtime::get().empty_tensor({2}, {1}, static_cast<int32_t>(DType::int32));
  Stream& stream = Runtime::get().current_stream();
  stream.fill_buffer(fault->storage->buffer, fault->storage->buffer_offset, 2 * sizeof(int32_t), 0);
  BufferPtr fault_buffer = fault->storage->buffer;
  const size_t fault_offset = fault->storage->buffer_offset;
  auto report = [fault_buffer, fault_offset, E]() -> std::string {
    int32_t recorded[2];
    std::memcpy(recorded, static_cast<unsigned char*>(fault_buffer->contents()) + fault_offset,
                sizeof recorded);
    if (recorded[0] == 0) return {};
    return concat("gather_qmv: ExpertIndices[", recorded[0] - 1, "] = ", recorded[1],
                  " is outside [0, ", E, ")");
  };
  KernelLaunch(shader_kernel("gather_qmv.metal", name))
      .tensor(0, x).tensor(1, w).tensor(2, scales).tensor(3, biases).tensor(4, indices)
      .tensor(5, *out).value(6, params).tensor(7, *fault)
      .completion_check(report)
      .threadgroups({static_cast<uint64_t>(P), static_cast<uint64_t>((N + kRowsPerGroup - 1) / kRowsPerGroup), 1},
                    {32, kSimdgroups, 1});
  return out;
}

}  // namespace etm::ops
