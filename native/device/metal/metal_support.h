// The Metal device's decisions that need no Metal: error wording, size and alignment rules,
// argument checks. Plain C++17 so that tests/test_metal_syntax.py can compile and run it on
// any host; metal_device.mm checks the numeric values below against the SDK's enums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "device/device.h"

namespace etm::device::metal::support {

// Metal's limits that the device checks before calling Metal, whose validation would
// otherwise stop the process. Apple docs: "Metal feature set tables" (buffer argument table
// entries) and MTLComputeCommandEncoder setBytes:length:atIndex: (4 KiB).
inline constexpr uint32_t kBufferArgumentSlots = 31;
inline constexpr size_t kMaxSetBytesLength = 4096;
// MTLComputeCommandEncoder setThreadgroupMemoryLength:atIndex: wants multiples of 16 bytes.
inline constexpr size_t kThreadgroupMemoryGranule = 16;
// MTLBlitCommandEncoder copyFromBuffer:... and fillBuffer:range:value: want offsets and
// lengths that are multiples of 4 on macOS; other ranges go through a compute kernel.
inline constexpr size_t kBlitGranule = 4;

// Values of MTLCommandBufferError (Apple docs: MTLCommandBufferError.Code).
enum class CommandBufferErrorCode : long {
  none = 0,
  internal = 1,
  timeout = 2,
  page_fault = 3,
  access_revoked = 4,  // formerly MTLCommandBufferErrorBlacklisted
  not_permitted = 7,
  out_of_memory = 8,
  invalid_resource = 9,
  memoryless = 10,
  device_removed = 11,
  stack_overflow = 12,
};

struct CommandBufferErrorInfo {
  const char* name;      // short name, e.g. "page fault"
  const char* constant;  // the SDK's constant, e.g. "MTLCommandBufferErrorPageFault"
  const char* meaning;   // what it means for a compute workload
};

inline const CommandBufferErrorInfo* command_buffer_error_info(long code) {
  static const CommandBufferErrorInfo kNone = {
      "no error", "MTLCommandBufferErrorNone", "Metal reported an error without a cause"};
  static const CommandBufferErrorInfo kInternal = {
      "internal error", "MTLCommandBufferErrorInternal",
      "the Metal driver failed internally"};
  static const CommandBufferErrorInfo kTimeout = {
      "timeout", "MTLCommandBufferErrorTimeout",
      "the GPU ran the command buffer longer than the system allows and stopped it; split "
      "the work into more command buffers or look for a kernel that does not terminate"};
  static const CommandBufferErrorInfo kPageFault = {
      "page fault", "MTLCommandBufferErrorPageFault",
      "a kernel accessed memory outside its buffers (an out-of-bounds index, a wrong "
      "offset or stride, or a buffer freed before the GPU finished)"};
  static const CommandBufferErrorInfo kAccessRevoked = {
      "access revoked", "MTLCommandBufferErrorAccessRevoked",
      "the system revoked this process's GPU access after too many timeouts or hangs "
      "(formerly MTLCommandBufferErrorBlacklisted); restart the process"};
  static const CommandBufferErrorInfo kNotPermitted = {
      "not permitted", "MTLCommandBufferErrorNotPermitted",
      "the process may not use the GPU (for example a background process without GPU "
      "access)"};
  static const CommandBufferErrorInfo kOutOfMemory = {
      "out of memory", "MTLCommandBufferErrorOutOfMemory",
      "the GPU did not have enough memory to run the command buffer"};
  static const CommandBufferErrorInfo kInvalidResource = {
      "invalid resource", "MTLCommandBufferErrorInvalidResource",
      "the command buffer referenced a buffer or pipeline that is no longer valid"};
  static const CommandBufferErrorInfo kMemoryless = {
      "memoryless", "MTLCommandBufferErrorMemoryless",
      "the GPU ran out of memoryless render attachment storage"};
  static const CommandBufferErrorInfo kDeviceRemoved = {
      "device removed", "MTLCommandBufferErrorDeviceRemoved",
      "the GPU was removed before the command buffer finished"};
  static const CommandBufferErrorInfo kStackOverflow = {
      "stack overflow", "MTLCommandBufferErrorStackOverflow",
      "a kernel used more call stack frames than its pipeline allows"};
  switch (static_cast<CommandBufferErrorCode>(code)) {
    case CommandBufferErrorCode::none: return &kNone;
    case CommandBufferErrorCode::internal: return &kInternal;
    case CommandBufferErrorCode::timeout: return &kTimeout;
    case CommandBufferErrorCode::page_fault: return &kPageFault;
    case CommandBufferErrorCode::access_revoked: return &kAccessRevoked;
    case CommandBufferErrorCode::not_permitted: return &kNotPermitted;
    case CommandBufferErrorCode::out_of_memory: return &kOutOfMemory;
    case CommandBufferErrorCode::invalid_resource: return &kInvalidResource;
    case CommandBufferErrorCode::memoryless: return &kMemoryless;
    case CommandBufferErrorCode::device_removed: return &kDeviceRemoved;
    case CommandBufferErrorCode::stack_overflow: return &kStackOverflow;
  }
  return nullptr;
}

// The message for a failed command buffer whose NSError is in MTLCommandBufferErrorDomain:
// the failure's name first, never a bare code.
inline std::string describe_command_buffer_error(long code, const std::string& description) {
  std::string message = "Metal command buffer failed: ";
  if (const CommandBufferErrorInfo* info = command_buffer_error_info(code)) {
    message += info->name;
    message += " (";
    message += info->constant;
    message += "): ";
    message += info->meaning;
  } else {
    message += "unknown MTLCommandBufferError code " + std::to_string(code);
  }
  if (!description.empty()) message += ". Metal says: " + description;
  return message;
}

// The message for a failed command buffer whose error is outside MTLCommandBufferErrorDomain,
// or that failed without an NSError.
inline std::string describe_foreign_command_buffer_error(const std::string& domain, long code,
                                                         const std::string& description) {
  if (domain.empty()) return "Metal command buffer failed without reporting an error";
  std::string message =
      "Metal command buffer failed: " + domain + " error " + std::to_string(code);
  if (!description.empty()) message += ": " + description;
  return message;
}


// ETMETAL_CAPTURE names the trace to write; Metal writes only .gputrace documents.
inline Status check_capture_path(const std::string& path) {
  const std::string suffix = ".gputrace";
  if (path.size() <= suffix.size() ||
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return Status::error("ETMETAL_CAPTURE must name a file ending in .gputrace, not '" + path +
                         "'");
  }
  return Status();
}

// Rounds `value` up to a multiple of `multiple` (> 0); false when the result overflows.
inline bool round_up(size_t value, size_t multiple, size_t* out) {
  const size_t remainder = value % multiple;
  if (remainder == 0) {
    *out = value;
    return true;
  }
  const size_t padding = multiple - remainder;
  if (value > SIZE_MAX - padding) return false;
  *out = value + padding;
  return true;
}

// newBufferWithBytesNoCopy:length:options:deallocator: needs a page-aligned pointer and a
// length that is a non-zero multiple of the page size.
inline bool can_wrap_in_place(const void* pointer, size_t length, size_t page_size) {
  return pointer != nullptr && length != 0 &&
         reinterpret_cast<uintptr_t>(pointer) % page_size == 0 && length % page_size == 0;
}

// Whether [offset, offset + length) lies inside a buffer of `buffer_length` bytes.
inline bool range_fits(size_t offset, size_t length, size_t buffer_length) {
  return offset <= buffer_length && length <= buffer_length - offset;
}

inline bool blit_aligned(size_t first_offset, size_t second_offset, size_t length) {
  return first_offset % kBlitGranule == 0 && second_offset % kBlitGranule == 0 &&
         length % kBlitGranule == 0;
}

// Checks a threadgroup shape against a pipeline's limit; empty when it is valid.
inline std::string check_threads_per_group(const Size3& threads_per_group,
                                           uint32_t max_total_threads) {
  const Size3& t = threads_per_group;
  if (t.x == 0 || t.y == 0 || t.z == 0) {
    return "threadgroup size " + std::to_string(t.x) + "x" + std::to_string(t.y) + "x" +
           std::to_string(t.z) + " has a zero dimension";
  }
  // Each factor is checked before multiplying so that the product cannot overflow.
  if (t.x > max_total_threads || t.y > max_total_threads || t.z > max_total_threads ||
      t.x * t.y > max_total_threads || t.volume() > max_total_threads) {
    return "threadgroup size " + std::to_string(t.x) + "x" + std::to_string(t.y) + "x" +
           std::to_string(t.z) + " exceeds the pipeline's maximum of " +
           std::to_string(max_total_threads) + " threads";
  }
  return std::string();
}

inline bool grid_is_empty(const Size3& grid) { return grid.x == 0 || grid.y == 0 || grid.z == 0; }

// One copyFromBuffer: moves at most this much: larger copies fail without an error (PyTorch's
// MPS copies split at the same size).
inline constexpr size_t kMaxBlitChunk = size_t{1} << 31;

// Bytes of the next blit of a copy that has `remaining` bytes left.
inline size_t next_blit_chunk(size_t remaining) {
  return remaining < kMaxBlitChunk ? remaining : kMaxBlitChunk;
}

// IEEE binary16 bits of `f`, rounded to nearest even.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);             // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);            // overflow
  if (magnitude < 0x38800000u) {                                                         // subnormal
    const float scaled = f < 0 ? -f * 16777216.0f : f * 16777216.0f;  // 2^24: units of 2^-24
    uint32_t units = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(units);
    if (rest > 0.5f || (rest == 0.5f && (units & 1u))) ++units;
    return static_cast<uint16_t>(sign | units);
  }
  uint32_t half = ((magnitude >> 13) - (112u << 10));
  const uint32_t dropped = magnitude & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// The scalar types a function constant can have (MTLDataType cases; metal_device.mm maps them).
enum class ConstantScalar { boolean, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float32, float16, bfloat16 };

// The bytes MTLFunctionConstantValues takes for `value` as a constant of type `type` (little
// endian, as on Apple silicon); false with `error` when the type cannot hold the value.
inline bool function_constant_bytes(ConstantScalar type, const FunctionConstantValue& value, unsigned char bytes[8],
                                    size_t* size, std::string* error) {
  using Kind = FunctionConstantValue::Kind;
  auto store = [&](uint64_t bits, size_t n) {
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(bits >> (8 * i));
    *size = n;
    return true;
  };
  if (type == ConstantScalar::boolean) {
    if (value.kind != Kind::boolean) return (*error = "needs a boolean value", false);
    return store(value.integer ? 1 : 0, 1);
  }
  if (type == ConstantScalar::float32 || type == ConstantScalar::float16 || type == ConstantScalar::bfloat16) {
    if (value.kind == Kind::boolean) return (*error = "needs a number, not a boolean", false);
    const float f = value.kind == Kind::integer ? static_cast<float>(value.integer) : static_cast<float>(value.floating);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    if (type == ConstantScalar::float32) return store(bits, 4);
    if (type == ConstantScalar::bfloat16) {
      if ((bits & 0x7fffffffu) > 0x7f800000u) return store(0x7fc0, 2);  // NaN
      return store((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16, 2);     // round to nearest even
    }
    return store(float_to_half_bits(f), 2);
  }
  if (value.kind != Kind::integer) return (*error = "needs an integer value", false);
  struct Range { int64_t low; uint64_t high; size_t size; };
  static const Range kRanges[] = {{INT8_MIN, INT8_MAX, 1},   {0, UINT8_MAX, 1},  {INT16_MIN, INT16_MAX, 2},
                                  {0, UINT16_MAX, 2},        {INT32_MIN, INT32_MAX, 4}, {0, UINT32_MAX, 4},
                                  {INT64_MIN, INT64_MAX, 8}, {0, UINT64_MAX, 8}};
  const Range& r = kRanges[static_cast<int>(type) - static_cast<int>(ConstantScalar::int8)];
  const int64_t v = value.integer;
  if (v < r.low || (v >= 0 && static_cast<uint64_t>(v) > r.high)) {
    return (*error = "cannot hold " + std::to_string(v), false);
  }
  return store(static_cast<uint64_t>(v), r.size);
}

// The graph cache's key: what the compiled graph depends on (the op, each operand's element
// type, sizes and strides, the op's scalars), not the memory it is fed (buffers, offsets).
inline std::string graph_cache_key(const GraphWorkload& workload) {
  std::string key = workload.op == GraphWorkload::Op::matmul ? "matmul" : "conv2d";
  auto add_operand = [&key](const GraphOperand& operand) {
    key += " d" + std::to_string(static_cast<int>(operand.dtype)) + " [";
    for (size_t d = 0; d < operand.sizes.size(); ++d)
      key += (d ? "," : "") + std::to_string(operand.sizes[d]) + ":" + std::to_string(operand.strides[d]);
    key += "]";
  };
  for (const GraphOperand& input : workload.inputs) add_operand(input);
  key += " ->";
  add_operand(workload.output);
  char scalars[64];
  std::snprintf(scalars, sizeof scalars, " %a %a", workload.alpha, workload.beta);
  key += scalars;
  for (int d = 0; d < 2; ++d) {
    key += " " + std::to_string(workload.stride[d]) + "/" + std::to_string(workload.padding[d]) + "/" +
           std::to_string(workload.dilation[d]);
  }
  key += " g" + std::to_string(workload.groups);
  return key;
}

}  // namespace etm::device::metal::support
