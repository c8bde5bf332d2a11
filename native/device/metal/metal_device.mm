// The Metal device: etm::device::Device over Metal.framework, in Objective-C++ with ARC.
//
// Thin by design: it carries out what the runtime decides (when to commit, where a barrier
// goes) and checks only what Metal would otherwise turn into a process abort. Every class
// here needs macOS 14 (Metal Shading Language 3.1, MTLDevice.architecture);
// create_metal_device checks the OS once. macOS 15 additions (residency sets, mathMode,
// MPSGraph workloads, which need MPSNDArray over a buffer offset) are
// used when both the SDK and the running OS have them.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/metal/metal_builtin_kernels.h"
#include "device/metal/metal_device.h"
#include "device/metal/metal_support.h"
#include "device/settings.h"

#if !__has_feature(objc_arc)
#error "metal_device.mm must be compiled with -fobjc-arc"
#endif

// The SDK decides which declarations exist; @available decides what runs.
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
#define ETM_METAL_SDK_HAS_MACOS_15 1
#else
#define ETM_METAL_SDK_HAS_MACOS_15 0
#endif
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 260000
#define ETM_METAL_SDK_HAS_MACOS_26 1
#else
#define ETM_METAL_SDK_HAS_MACOS_26 0
#endif

#define ETM_NEEDS_MACOS_14 API_AVAILABLE(macos(14.0))

namespace etm::device::metal {
namespace {

namespace support = etm::device::metal::support;
using support::CommandBufferErrorCode;

// The error table in metal_support.h must agree with the SDK.
static_assert(static_cast<long>(MTLCommandBufferErrorNone) ==
              static_cast<long>(CommandBufferErrorCode::none));
static_assert(static_cast<long>(MTLCommandBufferErrorInternal) ==
              static_cast<long>(CommandBufferErrorCode::internal));
static_assert(static_cast<long>(MTLCommandBufferErrorTimeout) ==
              static_cast<long>(CommandBufferErrorCode::timeout));
static_assert(static_cast<long>(MTLCommandBufferErrorPageFault) ==
              static_cast<long>(CommandBufferErrorCode::page_fault));
static_assert(static_cast<long>(MTLCommandBufferErrorAccessRevoked) ==
              static_cast<long>(CommandBufferErrorCode::access_revoked));
static_assert(static_cast<long>(MTLCommandBufferErrorNotPermitted) ==
              static_cast<long>(CommandBufferErrorCode::not_permitted));
static_assert(static_cast<long>(MTLCommandBufferErrorOutOfMemory) ==
              static_cast<long>(CommandBufferErrorCode::out_of_memory));
static_assert(static_cast<long>(MTLCommandBufferErrorInvalidResource) ==
              static_cast<long>(CommandBufferErrorCode::invalid_resource));
static_assert(static_cast<long>(MTLCommandBufferErrorStackOverflow) ==
              static_cast<long>(CommandBufferErrorCode::stack_overflow));
static_assert(sizeof(ByteCopyArguments) == 24 && sizeof(ByteFillArguments) == 24,
              "builtin kernel arguments must match their MSL layout");

// Shared storage: one allocation visible to CPU and GPU. Tracked hazards: Metal orders
// encoders that touch the same buffer, so only dispatches inside one concurrent compute
// encoder need the runtime's explicit barriers.
constexpr MTLResourceOptions kBufferOptions =
    MTLResourceStorageModeShared | MTLResourceHazardTrackingModeTracked;

// UTF8String and MTLBuffer.contents return inner pointers: ARC retains and autoreleases
// the receiver around such a call. The device's callers are plain C++ threads without an
// autorelease pool of their own, so each such call sits in a local pool; otherwise every
// buffer would stay allocated until its thread exits.
std::string to_string(NSString* text) {
  if (text == nil) return std::string();
  @autoreleasepool {
    const char* utf8 = text.UTF8String;
    return utf8 ? std::string(utf8) : std::string();
  }
}

void* contents_of(id<MTLBuffer> buffer) {
  @autoreleasepool {
    return buffer.contents;
  }
}

// nil when `text` is not valid UTF-8.
NSString* to_nsstring(const std::string& text) {
  return [[NSString alloc] initWithBytes:text.data()
                                  length:text.size()
                                encoding:NSUTF8StringEncoding];
}

std::string describe(NSError* error) {
  return error ? to_string(error.localizedDescription) : std::string("no details");
}

Status describe_failure(id<MTLCommandBuffer> command_buffer) {
  NSError* error = command_buffer.error;
  if (error != nil && [error.domain isEqualToString:MTLCommandBufferErrorDomain]) {
    return Status::error(support::describe_command_buffer_error(
        static_cast<long>(error.code), to_string(error.localizedDescription)));
  }
  return Status::error(support::describe_foreign_command_buffer_error(
      error ? to_string(error.domain) : std::string(), error ? static_cast<long>(error.code) : 0,
      error ? to_string(error.localizedDescription) : std::string()));
}

// ---------------------------------------------------------------------------------------
// GPU capture (ETMETAL_CAPTURE)

struct CaptureState {
  std::mutex mutex;
  bool attempted = false;  // one capture per process: Metal will not overwrite a trace
  bool running = false;
};

CaptureState& capture_state() {
  static CaptureState state;
  return state;
}

void stop_capture_at_exit() { etm::device::metal::stop_capture(); }

Status start_capture(id<MTLDevice> device, const std::string& path) {
  CaptureState& state = capture_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.attempted) return Status();
  state.attempted = true;
  Status valid = support::check_capture_path(path);
  if (!valid.ok()) return valid;
  MTLCaptureManager* manager = [MTLCaptureManager sharedCaptureManager];
  if (![manager supportsDestination:MTLCaptureDestinationGPUTraceDocument]) {
    return Status::error("ETMETAL_CAPTURE: this process cannot write GPU trace files; run it "
                         "with MTL_CAPTURE_ENABLED=1 in the environment");
  }
  NSString* trace_path = to_nsstring(path);
  if (trace_path == nil) return Status::error("ETMETAL_CAPTURE is not valid UTF-8");
  MTLCaptureDescriptor* descriptor = [[MTLCaptureDescriptor alloc] init];
  descriptor.captureObject = device;
  descriptor.destination = MTLCaptureDestinationGPUTraceDocument;
  descriptor.outputURL = [NSURL fileURLWithPath:trace_path];
  NSError* error = nil;
  if (![manager startCaptureWithDescriptor:descriptor error:&error]) {
    return Status::error("ETMETAL_CAPTURE: cannot start a GPU capture to '" + path +
                         "': " + describe(error));
  }
  state.running = true;
  std::atexit(stop_capture_at_exit);
  return Status();
}

// ---------------------------------------------------------------------------------------
// Residency (macOS 15), opt-in as in MLX: with ETMETAL_RESIDENT_MB set, buffers the device
// allocates join one set attached to each queue, up to that many bytes (at most the device's
// recommended working set), so the GPU need not make them resident per command buffer.
// Resident memory is wired: the system cannot page it out, hence off by default. Caller
// memory wrapped without a copy never joins (the caller owns its paging). Allocations beyond
// the capacity still work; Metal makes them resident when used. The set is an optimization:
// where Metal cannot make one (virtual machines, paravirtual GPUs) the device works without
// it.

#if ETM_METAL_SDK_HAS_MACOS_15
class Residency {
 public:
  explicit Residency(size_t capacity) : capacity_(capacity) {}

  void create_set(id<MTLDevice> device) {
    if (capacity_ == 0) return;
    if (@available(macOS 15.0, *)) {
      MTLResidencySetDescriptor* descriptor = [[MTLResidencySetDescriptor alloc] init];
      descriptor.label = @"etmetal allocations";
      NSError* error = nil;
      set_ = [device newResidencySetWithDescriptor:descriptor error:&error];
    }
  }

  void attach(id<MTLCommandQueue> queue) {
    if (@available(macOS 15.0, *)) {
      if (set_ == nil) return;
      id<MTLResidencySet> set = set_;
      [queue addResidencySet:set];
    }
  }

  // Whether the buffer joined the set (and must leave it through remove()).
  bool add(id<MTLBuffer> buffer, size_t bytes) {
    if (@available(macOS 15.0, *)) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (set_ == nil || bytes > capacity_ - std::min(capacity_, resident_bytes_)) return false;
      id<MTLResidencySet> set = set_;
      @autoreleasepool {
        [set addAllocation:buffer];
        [set commit];
        [set requestResidency];
      }
      resident_bytes_ += bytes;
      return true;
    }
    return false;
  }

  void remove(id<MTLBuffer> buffer, size_t bytes) {
    if (@available(macOS 15.0, *)) {
      std::lock_guard<std::mutex> lock(mutex_);
      id<MTLResidencySet> set = set_;
      @autoreleasepool {
        [set removeAllocation:buffer];
        [set commit];
      }
      resident_bytes_ -= bytes;
    }
  }

 private:
  std::mutex mutex_;
  id set_ = nil;  // id<MTLResidencySet>, typed loosely because the protocol is macOS 15
  const size_t capacity_;
  size_t resident_bytes_ = 0;
};
#else
// SDKs before macOS 15 have no residency sets: Metal makes buffers resident per command
// buffer.
class Residency {
 public:
  explicit Residency(size_t) {}
  void create_set(id<MTLDevice>) {}
  void attach(id<MTLCommandQueue>) {}
  bool add(id<MTLBuffer>, size_t) { return false; }
  void remove(id<MTLBuffer>, size_t) {}
};
#endif

// ---------------------------------------------------------------------------------------
// Graph workloads (MPSGraph), on macOS 15 and later: MPSNDArray reads a buffer from an
// offset only from there on, and tensors live at offsets inside their buffers.

#if ETM_METAL_SDK_HAS_MACOS_15
bool graphs_available() {
  if (@available(macOS 15.0, *)) return true;
  return false;
}

// A compiled graph: placeholders in the order of the workload's inputs, and its result.
// MPSGraph does not promise that one graph may be encoded from two threads at once, so
// encoding holds `encoding`.
struct ETM_NEEDS_MACOS_14 CompiledGraph {
  MPSGraph* graph = nil;
  std::vector<MPSGraphTensor*> inputs;
  MPSGraphTensor* output = nil;
  std::mutex encoding;
};

ETM_NEEDS_MACOS_14 MPSDataType mps_data_type(GraphDataType type) {
  switch (type) {
    case GraphDataType::float32: return MPSDataTypeFloat32;
    case GraphDataType::float16: return MPSDataTypeFloat16;
    case GraphDataType::bfloat16: return MPSDataTypeBFloat16;
  }
  return MPSDataTypeInvalid;
}

MPSShape* mps_shape(const std::vector<int64_t>& sizes) {
  std::vector<NSNumber*> numbers;
  for (int64_t size : sizes) numbers.push_back([NSNumber numberWithLongLong:size]);
  return [NSArray arrayWithObjects:numbers.data() count:numbers.size()];
}

// The sizes of the operand's memory read as a row-major array: a last-two-swapped operand
// is stored as the row-major transpose of what it means.
std::vector<int64_t> stored_sizes(const GraphOperand& operand) {
  std::vector<int64_t> sizes = operand.sizes;
  if (graph_layout(operand.sizes, operand.strides) == GraphLayout::last_two_swapped)
    std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  return sizes;
}

// A placeholder for the operand's memory and the tensor it means.
ETM_NEEDS_MACOS_14 MPSGraphTensor* add_input(CompiledGraph& compiled, const GraphOperand& operand) {
  MPSGraphTensor* placeholder = [compiled.graph placeholderWithShape:mps_shape(stored_sizes(operand))
                                                            dataType:mps_data_type(operand.dtype)
                                                                name:nil];
  compiled.inputs.push_back(placeholder);
  if (graph_layout(operand.sizes, operand.strides) != GraphLayout::last_two_swapped) return placeholder;
  const NSUInteger rank = operand.sizes.size();
  return [compiled.graph transposeTensor:placeholder dimension:rank - 2 withDimension:rank - 1 name:nil];
}

ETM_NEEDS_MACOS_14 MPSGraphTensor* scaled(MPSGraph* graph, MPSGraphTensor* tensor, double factor, MPSDataType type) {
  if (factor == 1.0) return tensor;
  return [graph multiplicationWithPrimaryTensor:tensor
                                secondaryTensor:[graph constantWithScalar:factor dataType:type]
                                           name:nil];
}

// Checks what the device relies on that the runtime's callers guarantee (device.h), so that
// a broken workload fails with a message instead of a Metal assertion.
Status check_workload(const GraphWorkload& workload) {
  const bool matmul = workload.op == GraphWorkload::Op::matmul;
  const size_t inputs = workload.inputs.size();
  if (inputs != 2 && inputs != 3)
    return Status::error("graph workload with " + std::to_string(inputs) + " inputs");
  std::vector<const GraphOperand*> operands;
  for (const GraphOperand& input : workload.inputs) operands.push_back(&input);
  operands.push_back(&workload.output);
  for (size_t i = 0; i < operands.size(); ++i) {
    const GraphOperand& operand = *operands[i];
    const GraphLayout layout = graph_layout(operand.sizes, operand.strides);
    const bool may_swap = matmul && i < 2;
    if (layout == GraphLayout::other || (layout == GraphLayout::last_two_swapped && !may_swap))
      return Status::error("graph operand " + std::to_string(i) + " has a layout MPSGraph does not take");
    if (operand.dtype != workload.output.dtype)
      return Status::error("graph operands differ in element type");
  }
  return Status();
}

ETM_NEEDS_MACOS_14 Status build_graph(const GraphWorkload& workload, CompiledGraph& compiled) {
  compiled.graph = [[MPSGraph alloc] init];
  MPSGraph* graph = compiled.graph;
  const MPSDataType type = mps_data_type(workload.output.dtype);
  MPSGraphTensor* first = add_input(compiled, workload.inputs[0]);
  MPSGraphTensor* second = add_input(compiled, workload.inputs[1]);
  MPSGraphTensor* result = nil;
  if (workload.op == GraphWorkload::Op::matmul) {
    result = [graph matrixMultiplicationWithPrimaryTensor:first secondaryTensor:second name:nil];
    result = scaled(graph, result, workload.alpha, type);
    if (workload.inputs.size() == 3) {
      MPSGraphTensor* addend = scaled(graph, add_input(compiled, workload.inputs[2]), workload.beta, type);
      result = [graph additionWithPrimaryTensor:result secondaryTensor:addend name:nil];
    }
  } else {
    MPSGraphConvolution2DOpDescriptor* descriptor = [MPSGraphConvolution2DOpDescriptor
        descriptorWithStrideInX:static_cast<NSUInteger>(workload.stride[1])
                      strideInY:static_cast<NSUInteger>(workload.stride[0])
                dilationRateInX:static_cast<NSUInteger>(workload.dilation[1])
                dilationRateInY:static_cast<NSUInteger>(workload.dilation[0])
                         groups:static_cast<NSUInteger>(workload.groups)
                    paddingLeft:static_cast<NSUInteger>(workload.padding[1])
                   paddingRight:static_cast<NSUInteger>(workload.padding[1])
                     paddingTop:static_cast<NSUInteger>(workload.padding[0])
                  paddingBottom:static_cast<NSUInteger>(workload.padding[0])
                   paddingStyle:MPSGraphPaddingStyleExplicit
                     dataLayout:MPSGraphTensorNamedDataLayoutNCHW
                  weightsLayout:MPSGraphTensorNamedDataLayoutOIHW];
    if (descriptor == nil) return Status::error("MPSGraph refused the convolution's parameters");
    result = [graph convolution2DWithSourceTensor:first weightsTensor:second descriptor:descriptor name:nil];
    if (result != nil && workload.inputs.size() == 3) {
      const int64_t channels = workload.inputs[2].sizes.empty() ? 1 : workload.inputs[2].sizes[0];
      MPSGraphTensor* bias = [graph reshapeTensor:add_input(compiled, workload.inputs[2])
                                        withShape:mps_shape({1, channels, 1, 1})
                                             name:nil];
      result = [graph additionWithPrimaryTensor:result secondaryTensor:bias name:nil];
    }
  }
  if (result == nil) return Status::error("MPSGraph could not build the graph");
  compiled.output = result;
  return Status();
}

// Compiled graphs by graph_cache_key, kept for the device's life as PyTorch's MPSGraphCache
// keeps them.
class ETM_NEEDS_MACOS_14 GraphCache {
 public:
  Status find_or_build(const GraphWorkload& workload, std::shared_ptr<CompiledGraph>* out) {
    const std::string key = support::graph_cache_key(workload);
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = graphs_.find(key);
    if (found != graphs_.end()) {
      *out = found->second;
      return Status();
    }
    auto compiled = std::make_shared<CompiledGraph>();
    @autoreleasepool {
      Status status = build_graph(workload, *compiled);
      if (!status.ok()) return status;
    }
    graphs_.emplace(key, compiled);
    *out = std::move(compiled);
    return Status();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<CompiledGraph>> graphs_;
};
#else
// SDKs before macOS 15 lack MPSNDArray over a buffer offset: no graph workloads.
bool graphs_available() { return false; }
class GraphCache {};
#endif

// ---------------------------------------------------------------------------------------
// What the device's objects share; outlives the Device while buffers or command buffers do.

class ETM_NEEDS_MACOS_14 DeviceContext {
 public:
  DeviceContext(id<MTLDevice> device, bool fast_math, size_t resident_bytes, size_t page_size)
      : device(device),
        residency(std::min(resident_bytes, static_cast<size_t>(device.recommendedMaxWorkingSetSize))),
        fast_math(fast_math),
        page_size(page_size),
        max_buffer_length(device.maxBufferLength),
        max_threadgroup_memory_length(device.maxThreadgroupMemoryLength) {}

  // Out parameters are __strong: ARC's default for them, __autoreleasing, would hand the
  // result to the autorelease pool drained before returning.
  Status compile(const std::string& source, id<MTLLibrary> __strong* out) {
    @autoreleasepool {
      NSString* text = to_nsstring(source);
      if (text == nil) return Status::error("MSL source is not valid UTF-8");
      MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
      options.languageVersion = language_version();
      configure_math(options);
      NSError* error = nil;
      id<MTLLibrary> library = [device newLibraryWithSource:text options:options error:&error];
      // A library with warnings comes with an error object too; only nil means failure.
      if (library == nil) {
        return Status::error("Metal shader compilation failed:\n" + describe(error));
      }
      *out = library;
      return Status();
    }
  }

  // The function specialised with constant values, each converted to the type the function
  // declares (reflection of the unspecialised function names types and indices).
  Status specialize(id<MTLLibrary> library, NSString* name, const std::vector<FunctionConstantValue>& constants,
                    id<MTLFunction> __strong* function) {
    NSDictionary<NSString*, MTLFunctionConstant*>* declared = (*function).functionConstantsDictionary;
    MTLFunctionConstantValues* values = [[MTLFunctionConstantValues alloc] init];
    for (const FunctionConstantValue& c : constants) {
      MTLFunctionConstant* target = nil;
      if (!c.name.empty()) {
        NSString* constant_name = to_nsstring(c.name);
        target = constant_name ? [declared objectForKey:constant_name] : nil;
      } else {
        for (MTLFunctionConstant* candidate in declared.allValues) {
          if (candidate.index == c.index) target = candidate;
        }
      }
      const std::string label = c.name.empty() ? "function constant " + std::to_string(c.index)
                                               : "function constant '" + c.name + "'";
      if (target == nil) return Status::error("the function declares no " + label);
      support::ConstantScalar scalar;
      switch (target.type) {
        case MTLDataTypeBool: scalar = support::ConstantScalar::boolean; break;
        case MTLDataTypeChar: scalar = support::ConstantScalar::int8; break;
        case MTLDataTypeUChar: scalar = support::ConstantScalar::uint8; break;
        case MTLDataTypeShort: scalar = support::ConstantScalar::int16; break;
        case MTLDataTypeUShort: scalar = support::ConstantScalar::uint16; break;
        case MTLDataTypeInt: scalar = support::ConstantScalar::int32; break;
        case MTLDataTypeUInt: scalar = support::ConstantScalar::uint32; break;
        case MTLDataTypeLong: scalar = support::ConstantScalar::int64; break;
        case MTLDataTypeULong: scalar = support::ConstantScalar::uint64; break;
        case MTLDataTypeFloat: scalar = support::ConstantScalar::float32; break;
        case MTLDataTypeHalf: scalar = support::ConstantScalar::float16; break;
        case MTLDataTypeBFloat: scalar = support::ConstantScalar::bfloat16; break;
        default: return Status::error(label + " has a type etmetal cannot set (MTLDataType " +
                                      std::to_string(static_cast<unsigned long>(target.type)) + ")");
      }
      unsigned char bytes[8];
      size_t size = 0;
      std::string error;
      if (!support::function_constant_bytes(scalar, c, bytes, &size, &error)) {
        return Status::error(label + " " + error);
      }
      [values setConstantValue:bytes type:target.type atIndex:target.index];
    }
    NSError* error = nil;
    id<MTLFunction> specialized = [library newFunctionWithName:name constantValues:values error:&error];
    if (specialized == nil) return Status::error("cannot specialise it: " + describe(error));
    *function = specialized;
    return Status();
  }

  Status new_pipeline_state(id<MTLLibrary> library, const std::string& kernel_name,
                            const std::vector<FunctionConstantValue>& constants,
                            id<MTLComputePipelineState> __strong* out) {
    @autoreleasepool {
      NSString* name = to_nsstring(kernel_name);
      id<MTLFunction> function = name ? [library newFunctionWithName:name] : nil;
      if (function == nil) {
        std::string known;
        for (NSString* candidate in library.functionNames) {
          known += (known.empty() ? "" : ", ") + to_string(candidate);
        }
        return Status::error("the Metal library has no function named '" + kernel_name +
                             "' (it has: " + (known.empty() ? "none" : known) + ")");
      }
      if (!constants.empty()) {
        Status status = specialize(library, name, constants, &function);
        if (!status.ok()) return Status::error("kernel '" + kernel_name + "': " + status.message());
      }
      if (function.functionType != MTLFunctionTypeKernel) {
        return Status::error("'" + kernel_name + "' is not a kernel function");
      }
      NSError* error = nil;
      id<MTLComputePipelineState> state =
          [device newComputePipelineStateWithFunction:function error:&error];
      if (state == nil) {
        return Status::error("Metal could not build a pipeline for kernel '" + kernel_name +
                             "': " + describe(error));
      }
      *out = state;
      return Status();
    }
  }

  // The byte copy and fill kernels, compiled on first use.
  Status builtin_pipelines(id<MTLComputePipelineState> __strong* copy,
                           id<MTLComputePipelineState> __strong* fill) {
    std::lock_guard<std::mutex> lock(builtin_mutex_);
    if (!builtin_compiled_) {
      builtin_compiled_ = true;
      id<MTLLibrary> library = nil;
      builtin_status_ = compile(kBuiltinKernelSource, &library);
      if (builtin_status_.ok())
        builtin_status_ = new_pipeline_state(library, kCopyBytesKernel, {}, &copy_pipeline_);
      if (builtin_status_.ok())
        builtin_status_ = new_pipeline_state(library, kFillBytesKernel, {}, &fill_pipeline_);
    }
    *copy = copy_pipeline_;
    *fill = fill_pipeline_;
    return builtin_status_;
  }

  const id<MTLDevice> device;
  Residency residency;
  GraphCache graphs;
  const bool fast_math;
  const size_t page_size;
  const size_t max_buffer_length;
  const size_t max_threadgroup_memory_length;

 private:
  // The newest MSL the OS has, as PyTorch chooses: 4.0 on macOS 26, 3.2 on macOS 15 (the c10
  // headers use its lambdas), else 3.1.
  static MTLLanguageVersion language_version() {
#if ETM_METAL_SDK_HAS_MACOS_26
    if (@available(macOS 26.0, *)) return MTLLanguageVersion4_0;
#endif
#if ETM_METAL_SDK_HAS_MACOS_15
    if (@available(macOS 15.0, *)) return MTLLanguageVersion3_2;
#endif
    return MTLLanguageVersion3_1;
  }

  // IEEE-safe math unless ETMETAL_FAST_MATH=1, so results match the CPU device.
  void configure_math(MTLCompileOptions* options) const {
#if ETM_METAL_SDK_HAS_MACOS_15
    if (@available(macOS 15.0, *)) {
      options.mathMode = fast_math ? MTLMathModeFast : MTLMathModeSafe;
      options.mathFloatingPointFunctions =
          fast_math ? MTLMathFloatingPointFunctionsFast : MTLMathFloatingPointFunctionsPrecise;
      return;
    }
#endif
#pragma clang diagnostic push
    // fastMathEnabled is deprecated from macOS 15 on, where the branch above replaces it.
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    options.fastMathEnabled = fast_math ? YES : NO;
#pragma clang diagnostic pop
  }

  std::mutex builtin_mutex_;
  bool builtin_compiled_ = false;
  Status builtin_status_;
  id<MTLComputePipelineState> copy_pipeline_ = nil;
  id<MTLComputePipelineState> fill_pipeline_ = nil;
};

// ---------------------------------------------------------------------------------------
// Buffers, pipelines, libraries

class ETM_NEEDS_MACOS_14 MetalBuffer final : public Buffer {
 public:
  // Only buffers the device allocated may join the residency set.
  MetalBuffer(std::shared_ptr<DeviceContext> context, id<MTLBuffer> buffer, size_t length,
              bool may_be_resident)
      : context_(std::move(context)),
        buffer_(buffer),
        contents_(contents_of(buffer)),
        length_(length),
        resident_(may_be_resident && context_->residency.add(buffer, buffer.length)) {}

  ~MetalBuffer() override {
    if (resident_) context_->residency.remove(buffer_, buffer_.length);
  }

  void* contents() override { return contents_; }
  size_t length() const override { return length_; }
  // By reference, so that the encoding hot path neither retains nor autoreleases.
  const id<MTLBuffer>& metal_buffer() const { return buffer_; }

 private:
  const std::shared_ptr<DeviceContext> context_;
  const id<MTLBuffer> buffer_;
  void* const contents_;
  const size_t length_;  // as requested; the allocation is rounded up to whole pages
  const bool resident_;
};

class ETM_NEEDS_MACOS_14 MetalPipeline final : public Pipeline {
 public:
  MetalPipeline(std::string name, id<MTLComputePipelineState> state)
      : name_(std::move(name)),
        state_(state),
        max_total_threads_(static_cast<uint32_t>(state.maxTotalThreadsPerThreadgroup)),
        thread_execution_width_(static_cast<uint32_t>(state.threadExecutionWidth)),
        static_threadgroup_memory_length_(state.staticThreadgroupMemoryLength) {}

  const std::string& name() const override { return name_; }
  uint32_t max_total_threads_per_threadgroup() const override { return max_total_threads_; }
  uint32_t thread_execution_width() const override { return thread_execution_width_; }
  size_t static_threadgroup_memory_length() const override {
    return static_threadgroup_memory_length_;
  }
  const id<MTLComputePipelineState>& state() const { return state_; }

 private:
  const std::string name_;
  const id<MTLComputePipelineState> state_;
  const uint32_t max_total_threads_;
  const uint32_t thread_execution_width_;
  const size_t static_threadgroup_memory_length_;
};

class ETM_NEEDS_MACOS_14 MetalLibrary final : public Library {
 public:
  MetalLibrary(std::shared_ptr<DeviceContext> context, id<MTLLibrary> library)
      : context_(std::move(context)), library_(library) {}

  Status new_pipeline(const std::string& kernel_name,
                      std::shared_ptr<Pipeline>* out) override {
    return new_specialized_pipeline(kernel_name, {}, out);
  }

  Status new_specialized_pipeline(const std::string& kernel_name,
                                  const std::vector<FunctionConstantValue>& constants,
                                  std::shared_ptr<Pipeline>* out) override {
    if (out == nullptr) return Status::error("new_pipeline: null output");
    id<MTLComputePipelineState> state = nil;
    Status status = context_->new_pipeline_state(library_, kernel_name, constants, &state);
    if (!status.ok()) return status;
    *out = std::make_shared<MetalPipeline>(kernel_name, state);
    return Status();
  }

 private:
  const std::shared_ptr<DeviceContext> context_;
  const id<MTLLibrary> library_;
};

// ---------------------------------------------------------------------------------------
// Command buffers

// An Objective-C object a command buffer keeps alive until it completes.
struct RetainedObject {
  id object;
};

// The part of a command buffer that its completion handler touches, on Metal's thread.
class Completion {
 public:
  void set_committed(std::vector<std::shared_ptr<void>> retained) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = CommandBufferState::committed;
    retained_ = std::move(retained);
  }

  void add_handler(std::function<void(const Status&)> handler) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (state_ == CommandBufferState::completed || state_ == CommandBufferState::failed) {
      const Status outcome = error_;
      lock.unlock();
      run(handler, outcome);
      return;
    }
    handlers_.push_back(std::move(handler));
  }

  // The GPU's start and end of the buffer; set before finish() so handlers see it.
  void set_times(const ExecutionTimes& times) {
    std::lock_guard<std::mutex> lock(mutex_);
    times_ = times;
  }

  ExecutionTimes times() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return times_;
  }

  // Records the outcome, runs the handlers, then releases what the GPU no longer uses and
  // wakes waiters, so that a returning wait_until_completed() has seen every handler run.
  void finish(const Status& outcome) {
    std::vector<std::function<void(const Status&)>> handlers;
    std::vector<std::shared_ptr<void>> retained;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      state_ = outcome.ok() ? CommandBufferState::completed : CommandBufferState::failed;
      error_ = outcome;
      handlers.swap(handlers_);
    }
    for (const auto& handler : handlers) run(handler, outcome);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      retained.swap(retained_);
      done_ = true;
    }
    retained.clear();
    finished_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (state_ == CommandBufferState::recording) return;  // nothing was committed
    finished_.wait(lock, [this] { return done_; });
  }

  CommandBufferState state() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_;
  }

  Status error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  // Handlers run on Metal's completion thread, where an escaping exception would end the
  // process; device.h requires handlers not to throw, this only contains a broken one.
  static void run(const std::function<void(const Status&)>& handler, const Status& outcome) {
    try {
      handler(outcome);
    } catch (...) {
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable finished_;
  CommandBufferState state_ = CommandBufferState::recording;
  Status error_;
  ExecutionTimes times_;
  bool done_ = false;
  std::vector<std::function<void(const Status&)>> handlers_;
  std::vector<std::shared_ptr<void>> retained_;
};

// A command buffer and its one reusable compute encoder. Metal command buffers are created
// with unretained references: this object keeps every bound buffer and pipeline alive
// until the completed handler runs. Encoding mistakes that Metal would answer with an
// assertion are skipped and recorded; the command buffer then completes as failed with
// the first such message.
class ETM_NEEDS_MACOS_14 MetalCommandBuffer final : public CommandBuffer, public ComputeEncoder {
 public:
  MetalCommandBuffer(std::shared_ptr<DeviceContext> context, id<MTLCommandBuffer> command_buffer,
                     std::string creation_error)
      : context_(std::move(context)),
        command_buffer_(command_buffer),
        completion_(std::make_shared<Completion>()),
        recording_error_(std::move(creation_error)) {}

  ~MetalCommandBuffer() override {
    // Metal asserts when an encoder is released without endEncoding.
    end_encoding();
  }

  // CommandBuffer

  ComputeEncoder& compute_encoder() override {
    open_compute_encoder();
    return *this;
  }

  void copy_buffer(std::shared_ptr<Buffer> source, size_t source_offset,
                   std::shared_ptr<Buffer> destination, size_t destination_offset,
                   size_t length) override {
    MetalBuffer* from = as_metal_buffer(source, "copy_buffer source");
    MetalBuffer* to = as_metal_buffer(destination, "copy_buffer destination");
    if (from == nullptr || to == nullptr || !can_encode()) return;
    if (!support::range_fits(source_offset, length, from->length()) ||
        !support::range_fits(destination_offset, length, to->length())) {
      record_error("copy_buffer: range outside its buffers");
      return;
    }
    if (length == 0) return;
    retained_.push_back(source);
    retained_.push_back(destination);
    if (support::blit_aligned(source_offset, destination_offset, length)) {
      id<MTLBlitCommandEncoder> blit = open_blit_encoder();
      if (blit == nil) return;
      for (size_t done = 0; done < length;) {
        const size_t chunk = support::next_blit_chunk(length - done);
        [blit copyFromBuffer:from->metal_buffer()
                sourceOffset:source_offset + done
                    toBuffer:to->metal_buffer()
           destinationOffset:destination_offset + done
                        size:chunk];
        done += chunk;
      }
      return;
    }
    const ByteCopyArguments arguments{source_offset, destination_offset, length};
    encode_builtin(/*copy=*/true, from->metal_buffer(), to->metal_buffer(), &arguments,
                   sizeof(arguments), length);
  }

  void fill_buffer(std::shared_ptr<Buffer> destination, size_t offset, size_t length,
                   uint8_t value) override {
    MetalBuffer* to = as_metal_buffer(destination, "fill_buffer destination");
    if (to == nullptr || !can_encode()) return;
    if (!support::range_fits(offset, length, to->length())) {
      record_error("fill_buffer: range outside its buffer");
      return;
    }
    if (length == 0) return;
    retained_.push_back(destination);
    if (support::blit_aligned(offset, 0, length)) {
      id<MTLBlitCommandEncoder> blit = open_blit_encoder();
      if (blit == nil) return;
      [blit fillBuffer:to->metal_buffer() range:NSMakeRange(offset, length) value:value];
      return;
    }
    const ByteFillArguments arguments{offset, length, value};
    encode_builtin(/*copy=*/false, nil, to->metal_buffer(), &arguments, sizeof(arguments),
                   length);
  }

  void add_completed_handler(std::function<void(const Status&)> handler) override {
    if (handler) completion_->add_handler(std::move(handler));
  }

  Status encode_graph(const GraphWorkload& workload) override {
#if ETM_METAL_SDK_HAS_MACOS_15
    if (@available(macOS 15.0, *)) {
      Status valid = check_workload(workload);
      if (!valid.ok()) return valid;
      std::vector<std::pair<MetalBuffer*, const GraphOperand*>> operands;
      for (const GraphOperand& input : workload.inputs)
        operands.emplace_back(as_metal_buffer(input.buffer, "graph input"), &input);
      operands.emplace_back(as_metal_buffer(workload.output.buffer, "graph output"), &workload.output);
      for (const auto& [buffer, operand] : operands) {
        if (buffer == nullptr) return Status();  // recorded: the command buffer fails
        int64_t elements = 1;
        for (int64_t size : operand->sizes) elements *= size;
        const size_t element_bytes = operand->dtype == GraphDataType::float32 ? 4 : 2;
        if (elements <= 0 ||
            !support::range_fits(operand->offset, static_cast<size_t>(elements) * element_bytes, buffer->length()))
          return Status::error("a graph operand reaches outside its buffer");
      }
      if (!can_encode()) return Status();
      std::shared_ptr<CompiledGraph> compiled;
      Status status = context_->graphs.find_or_build(workload, &compiled);
      if (!status.ok()) return status;
      end_encoding();
      @autoreleasepool {
        std::vector<MPSGraphTensorData*> data;
        for (const auto& [buffer, operand] : operands) {
          MPSNDArrayDescriptor* descriptor =
              [MPSNDArrayDescriptor descriptorWithDataType:mps_data_type(operand->dtype)
                                                     shape:mps_shape(stored_sizes(*operand))];
          descriptor.preferPackedRows = YES;  // the buffer holds rows without padding
          MPSNDArray* array = [[MPSNDArray alloc] initWithBuffer:buffer->metal_buffer()
                                                          offset:operand->offset
                                                      descriptor:descriptor];
          data.push_back([[MPSGraphTensorData alloc] initWithMPSNDArray:array]);
          retained_.push_back(std::make_shared<RetainedObject>(RetainedObject{data.back()}));
        }
        MPSGraphTensorData* result = data.back();
        data.pop_back();
        MPSGraphTensor* output = compiled->output;
        MPSGraphTensorDataDictionary* feeds = [NSDictionary dictionaryWithObjects:data.data()
                                                                          forKeys:compiled->inputs.data()
                                                                            count:data.size()];
        MPSGraphTensorDataDictionary* results = [NSDictionary dictionaryWithObjects:&result
                                                                            forKeys:&output
                                                                              count:1];
        if (graph_command_buffer_ == nil) {
          graph_command_buffer_ = [MPSCommandBuffer commandBufferWithCommandBuffer:command_buffer_];
          command_buffer_ = graph_command_buffer_;
        }
        std::lock_guard<std::mutex> lock(compiled->encoding);
        [compiled->graph encodeToCommandBuffer:graph_command_buffer_
                                         feeds:feeds
                              targetOperations:nil
                             resultsDictionary:results
                           executionDescriptor:nil];
      }
      for (const GraphOperand& input : workload.inputs) retained_.push_back(input.buffer);
      retained_.push_back(workload.output.buffer);
      retained_.push_back(std::move(compiled));
      return Status();
    }
#endif
    (void)workload;
    return Status::error("MPSGraph workloads need macOS 15 (MPSNDArray over a buffer offset)");
  }

  void record_execution_times() override { timed_ = true; }
  ExecutionTimes execution_times() const override { return completion_->times(); }

  void commit() override {
    if (committed_) return;
    committed_ = true;
    end_encoding();
    completion_->set_committed(std::move(retained_));
    retained_.clear();
    std::shared_ptr<Completion> completion = completion_;
    if (command_buffer_ == nil) {
      // No Metal command buffer exists to call back; report on a thread of our own so that
      // handlers still run off the committing thread, as they do on success.
      const Status failure = Status::error(recording_error_);
      std::thread([completion, failure] { completion->finish(failure); }).detach();
      return;
    }
    const std::string recording_error = recording_error_;
    const bool timed = timed_;
    [command_buffer_ addCompletedHandler:^(id<MTLCommandBuffer> finished) {
      if (timed) {
        // GPU timestamps are seconds of the host's mach_absolute_time (host_clock_us).
        ExecutionTimes times;
        times.buffer.start_us = finished.GPUStartTime * 1e6;
        times.buffer.end_us = finished.GPUEndTime * 1e6;
        completion->set_times(times);
      }
      Status outcome;
      if (finished.status == MTLCommandBufferStatusError) {
        outcome = describe_failure(finished);
        if (!recording_error.empty()) {
          outcome = Status::error(recording_error + "; then " + outcome.message());
        }
      } else if (!recording_error.empty()) {
        outcome = Status::error(recording_error);
      }
      completion->finish(outcome);
    }];
    @autoreleasepool {
      [command_buffer_ commit];
    }
  }

  void wait_until_completed() override {
    if (committed_ && command_buffer_ != nil) {
      @autoreleasepool {
        [command_buffer_ waitUntilCompleted];
      }
    }
    completion_->wait();
  }

  CommandBufferState state() const override { return completion_->state(); }
  Status error() const override { return completion_->error(); }

  // ComputeEncoder

  void set_pipeline(std::shared_ptr<Pipeline> pipeline) override {
    auto* metal_pipeline = dynamic_cast<MetalPipeline*>(pipeline.get());
    if (metal_pipeline == nullptr) {
      record_error("set_pipeline: not a pipeline of the Metal device");
      return;
    }
    id<MTLComputeCommandEncoder> encoder = open_compute_encoder();
    if (encoder == nil) return;
    [encoder setComputePipelineState:metal_pipeline->state()];
    pipeline_max_threads_ = metal_pipeline->max_total_threads_per_threadgroup();
    pipeline_static_threadgroup_memory_ = metal_pipeline->static_threadgroup_memory_length();
    // Lengths an earlier kernel set stay in the encoder but mean nothing to this one.
    threadgroup_memory_lengths_.fill(0);
    threadgroup_memory_total_ = 0;
    retained_.push_back(std::move(pipeline));
  }

  void set_buffer(std::shared_ptr<Buffer> buffer, size_t offset, uint32_t index) override {
    if (!check_index(index, "set_buffer")) return;
    if (buffer == nullptr) {
      // An empty tensor binds nothing; setBuffer:nil is legal and the kernel reads nothing.
      id<MTLComputeCommandEncoder> encoder = open_compute_encoder();
      if (encoder != nil) [encoder setBuffer:nil offset:0 atIndex:index];
      return;
    }
    MetalBuffer* metal_buffer = as_metal_buffer(buffer, "set_buffer");
    if (metal_buffer == nullptr) return;
    if (offset > metal_buffer->length()) {
      record_error("set_buffer: offset " + std::to_string(offset) + " is past the end of a " +
                   std::to_string(metal_buffer->length()) + "-byte buffer");
      return;
    }
    id<MTLComputeCommandEncoder> encoder = open_compute_encoder();
    if (encoder == nil) return;
    [encoder setBuffer:metal_buffer->metal_buffer() offset:offset atIndex:index];
    retained_.push_back(std::move(buffer));
  }

  void set_bytes(const void* data, size_t length, uint32_t index) override {
    if (!check_index(index, "set_bytes")) return;
    if (data == nullptr || length == 0 || length > support::kMaxSetBytesLength) {
      record_error("set_bytes: needs 1 to " + std::to_string(support::kMaxSetBytesLength) +
                   " bytes of data, got " + std::to_string(length) +
                   (data ? "" : " from a null pointer"));
      return;
    }
    id<MTLComputeCommandEncoder> encoder = open_compute_encoder();
    if (encoder == nil) return;
    [encoder setBytes:data length:length atIndex:index];
  }

  void set_threadgroup_memory_length(size_t length, uint32_t index) override {
    if (!check_index(index, "set_threadgroup_memory_length")) return;
    size_t rounded = 0;
    if (!support::round_up(length, support::kThreadgroupMemoryGranule, &rounded) ||
        rounded > context_->max_threadgroup_memory_length) {
      record_error("set_threadgroup_memory_length: " + std::to_string(length) +
                   " bytes exceed the device's " +
                   std::to_string(context_->max_threadgroup_memory_length) +
                   " bytes of threadgroup memory");
      return;
    }
    id<MTLComputeCommandEncoder> encoder = open_compute_encoder();
    if (encoder == nil) return;
    [encoder setThreadgroupMemoryLength:rounded atIndex:index];
    threadgroup_memory_total_ += rounded - threadgroup_memory_lengths_[index];
    threadgroup_memory_lengths_[index] = rounded;
  }

  void dispatch_threads(Size3 grid, Size3 threads_per_group) override {
    if (support::grid_is_empty(grid)) return;
    id<MTLComputeCommandEncoder> encoder = checked_dispatch_encoder(threads_per_group);
    if (encoder == nil) return;
    [encoder dispatchThreads:MTLSizeMake(grid.x, grid.y, grid.z)
        threadsPerThreadgroup:MTLSizeMake(threads_per_group.x, threads_per_group.y,
                                          threads_per_group.z)];
  }

  void dispatch_threadgroups(Size3 groups, Size3 threads_per_group) override {
    if (support::grid_is_empty(groups)) return;
    id<MTLComputeCommandEncoder> encoder = checked_dispatch_encoder(threads_per_group);
    if (encoder == nil) return;
    [encoder dispatchThreadgroups:MTLSizeMake(groups.x, groups.y, groups.z)
            threadsPerThreadgroup:MTLSizeMake(threads_per_group.x, threads_per_group.y,
                                              threads_per_group.z)];
  }

  void memory_barrier() override {
    // Without an open compute encoder there is nothing to order inside one: Metal's hazard
    // tracking already orders separate encoders.
    if (compute_ == nil) return;
    @autoreleasepool {
      [compute_ memoryBarrierWithScope:MTLBarrierScopeBuffers];
    }
  }

 private:
  // After a recorded error the command buffer fails as a whole: nothing more is encoded, so
  // no dispatch runs with a binding that was skipped (it would see the previous kernel's).
  bool can_encode() {
    if (committed_) {
      record_error("encoding into a command buffer that was already committed");
      return false;
    }
    return command_buffer_ != nil && recording_error_.empty();
  }

  void record_error(const std::string& message) {
    if (recording_error_.empty()) recording_error_ = "Metal encoding error: " + message;
  }

  bool check_index(uint32_t index, const char* what) {
    if (index < support::kBufferArgumentSlots) return true;
    record_error(std::string(what) + ": index " + std::to_string(index) +
                 " is outside Metal's argument table (0 to " +
                 std::to_string(support::kBufferArgumentSlots - 1) + ")");
    return false;
  }

  MetalBuffer* as_metal_buffer(const std::shared_ptr<Buffer>& buffer, const char* what) {
    auto* metal_buffer = dynamic_cast<MetalBuffer*>(buffer.get());
    if (metal_buffer == nullptr) {
      record_error(std::string(what) + ": " +
                   (buffer ? "not a buffer of the Metal device" : "null buffer"));
    }
    return metal_buffer;
  }

  id<MTLComputeCommandEncoder> checked_dispatch_encoder(const Size3& threads_per_group) {
    if (!can_encode()) return nil;
    if (pipeline_max_threads_ == 0 || compute_ == nil) {
      record_error("dispatch without a pipeline set in this compute encoder");
      return nil;
    }
    const std::string problem =
        support::check_threads_per_group(threads_per_group, pipeline_max_threads_);
    if (!problem.empty()) {
      record_error("dispatch: " + problem);
      return nil;
    }
    const size_t threadgroup_memory =
        pipeline_static_threadgroup_memory_ + threadgroup_memory_total_;
    if (threadgroup_memory > context_->max_threadgroup_memory_length) {
      record_error("dispatch: " + std::to_string(threadgroup_memory) +
                   " bytes of threadgroup memory (static and set) exceed the device's " +
                   std::to_string(context_->max_threadgroup_memory_length));
      return nil;
    }
    return compute_;
  }

  void reset_encoder_state() {
    pipeline_max_threads_ = 0;
    pipeline_static_threadgroup_memory_ = 0;
    threadgroup_memory_lengths_.fill(0);
    threadgroup_memory_total_ = 0;
  }

  id<MTLComputeCommandEncoder> open_compute_encoder() {
    if (compute_ != nil) return compute_;
    if (!can_encode()) return nil;
    end_encoding();
    @autoreleasepool {
      compute_ = [command_buffer_ computeCommandEncoderWithDispatchType:MTLDispatchTypeConcurrent];
    }
    reset_encoder_state();  // a new encoder starts with no bindings
    if (compute_ == nil) record_error("Metal could not create a compute encoder");
    return compute_;
  }

  id<MTLBlitCommandEncoder> open_blit_encoder() {
    if (!can_encode()) return nil;
    if (blit_ != nil) return blit_;
    end_encoding();
    @autoreleasepool {
      blit_ = [command_buffer_ blitCommandEncoder];
    }
    if (blit_ == nil) record_error("Metal could not create a blit encoder");
    return blit_;
  }

  void end_encoding() {
    @autoreleasepool {
      if (compute_ != nil) {
        [compute_ endEncoding];
        compute_ = nil;
        reset_encoder_state();
      }
      if (blit_ != nil) {
        [blit_ endEncoding];
        blit_ = nil;
      }
    }
  }

  // A byte copy or fill the blit encoder cannot take, as a compute dispatch in an encoder of
  // its own, so that it is ordered after earlier work and before later work like a blit.
  void encode_builtin(bool copy, id<MTLBuffer> source, id<MTLBuffer> destination,
                      const void* arguments, size_t arguments_length, uint64_t length) {
    id<MTLComputePipelineState> copy_pipeline = nil;
    id<MTLComputePipelineState> fill_pipeline = nil;
    Status status = context_->builtin_pipelines(&copy_pipeline, &fill_pipeline);
    if (!status.ok()) {
      record_error("the byte copy/fill kernels did not compile: " + status.message());
      return;
    }
    id<MTLComputePipelineState> pipeline = copy ? copy_pipeline : fill_pipeline;
    end_encoding();
    id<MTLComputeCommandEncoder> encoder = nil;
    @autoreleasepool {
      encoder = [command_buffer_ computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
    }
    if (encoder == nil) {
      record_error("Metal could not create a compute encoder");
      return;
    }
    [encoder setComputePipelineState:pipeline];
    NSUInteger index = 0;
    if (copy) [encoder setBuffer:source offset:0 atIndex:index++];
    [encoder setBuffer:destination offset:0 atIndex:index++];
    [encoder setBytes:arguments length:arguments_length atIndex:index];
    const uint64_t threads = std::min<uint64_t>(length, kBuiltinMaxThreads);
    const uint64_t group =
        std::min<uint64_t>(threads, static_cast<uint64_t>(pipeline.maxTotalThreadsPerThreadgroup));
    [encoder dispatchThreads:MTLSizeMake(threads, 1, 1)
        threadsPerThreadgroup:MTLSizeMake(group, 1, 1)];
    [encoder endEncoding];
  }

  const std::shared_ptr<DeviceContext> context_;
  // nil when Metal could not create one. Once a graph is encoded, the MPSCommandBuffer
  // wrapping it: MPSGraph may commit the work so far and continue in a new Metal command
  // buffer (commitAndContinue), so everything after goes through the wrapper.
  id<MTLCommandBuffer> command_buffer_;
#if ETM_METAL_SDK_HAS_MACOS_15
  MPSCommandBuffer* graph_command_buffer_ = nil;
#endif
  const std::shared_ptr<Completion> completion_;
  id<MTLComputeCommandEncoder> compute_ = nil;
  id<MTLBlitCommandEncoder> blit_ = nil;
  // State of the open compute encoder, for the checks Metal would otherwise assert on.
  uint32_t pipeline_max_threads_ = 0;  // of the pipeline set in the open encoder; 0: none
  size_t pipeline_static_threadgroup_memory_ = 0;
  std::array<size_t, support::kBufferArgumentSlots> threadgroup_memory_lengths_{};
  size_t threadgroup_memory_total_ = 0;
  std::vector<std::shared_ptr<void>> retained_;
  std::string recording_error_;
  bool committed_ = false;
  bool timed_ = false;
};

class ETM_NEEDS_MACOS_14 MetalCommandQueue final : public CommandQueue {
 public:
  MetalCommandQueue(std::shared_ptr<DeviceContext> context, id<MTLCommandQueue> queue)
      : context_(std::move(context)), queue_(queue) {}

  std::shared_ptr<CommandBuffer> new_command_buffer() override {
    id<MTLCommandBuffer> command_buffer = nil;
    @autoreleasepool {
      if (queue_ != nil) command_buffer = [queue_ commandBufferWithUnretainedReferences];
    }
    std::string error;
    if (queue_ == nil) {
      error = "Metal could not create a command queue";
    } else if (command_buffer == nil) {
      error = "Metal could not create a command buffer";
    }
    return std::make_shared<MetalCommandBuffer>(context_, command_buffer, std::move(error));
  }

 private:
  const std::shared_ptr<DeviceContext> context_;
  const id<MTLCommandQueue> queue_;  // nil when Metal could not create one
};

// ---------------------------------------------------------------------------------------
// The device

class ETM_NEEDS_MACOS_14 MetalDevice final : public Device {
 public:
  explicit MetalDevice(std::shared_ptr<DeviceContext> context)
      : context_(std::move(context)),
        name_(to_string(context_->device.name)),
        architecture_(to_string(context_->device.architecture.name)),
        recommended_max_working_set_size_(
            static_cast<size_t>(context_->device.recommendedMaxWorkingSetSize)) {}

  const std::string& name() const override { return name_; }
  const char* kind() const override { return "metal"; }
  std::string architecture() const override { return architecture_; }
  bool runs_graphs() const override { return graphs_available(); }
  size_t recommended_max_working_set_size() const override {
    return recommended_max_working_set_size_;
  }

  Status new_buffer(size_t length, std::shared_ptr<Buffer>* out) override {
    if (out == nullptr) return Status::error("new_buffer: null output");
    size_t allocation = 0;
    if (!support::round_up(std::max<size_t>(length, 1), context_->page_size, &allocation) ||
        allocation > context_->max_buffer_length) {
      return Status::error("cannot allocate " + std::to_string(length) +
                           " bytes: the Metal device's largest buffer is " +
                           std::to_string(context_->max_buffer_length) + " bytes");
    }
    @autoreleasepool {
      id<MTLBuffer> buffer = [context_->device newBufferWithLength:allocation
                                                           options:kBufferOptions];
      if (buffer == nil) {
        return Status::error("Metal could not allocate a buffer of " +
                             std::to_string(allocation) + " bytes (out of memory?)");
      }
      *out = std::make_shared<MetalBuffer>(context_, buffer, length, true);
    }
    return Status();
  }

  Status new_buffer_no_copy(void* pointer, size_t length,
                            std::shared_ptr<Buffer>* out) override {
    if (out == nullptr) return Status::error("new_buffer_no_copy: null output");
    out->reset();
    if (!support::can_wrap_in_place(pointer, length, context_->page_size) ||
        length > context_->max_buffer_length) {
      return Status();
    }
    @autoreleasepool {
      // No deallocator: the caller owns the memory and keeps it alive (device.h).
      id<MTLBuffer> buffer = [context_->device newBufferWithBytesNoCopy:pointer
                                                                 length:length
                                                                options:kBufferOptions
                                                            deallocator:nil];
      // Metal may still refuse memory it cannot map (e.g. not from the VM allocator): the
      // caller then copies, as for unaligned memory.
      if (buffer != nil) *out = std::make_shared<MetalBuffer>(context_, buffer, length, false);
    }
    return Status();
  }

  Status new_library(const std::string& source, std::shared_ptr<Library>* out) override {
    if (out == nullptr) return Status::error("new_library: null output");
    id<MTLLibrary> library = nil;
    Status status = context_->compile(source, &library);
    if (!status.ok()) return status;
    *out = std::make_shared<MetalLibrary>(context_, library);
    return Status();
  }

  std::shared_ptr<CommandQueue> new_command_queue() override {
    @autoreleasepool {  // the caller's thread (Python's main thread) may never drain a pool
      id<MTLCommandQueue> queue = [context_->device newCommandQueue];
      if (queue != nil) context_->residency.attach(queue);
      return std::make_shared<MetalCommandQueue>(context_, queue);
    }
  }

 private:
  const std::shared_ptr<DeviceContext> context_;
  const std::string name_;
  const std::string architecture_;
  const size_t recommended_max_working_set_size_;
};

struct Settings {
  bool fast_math = false;
  std::string capture_path;
  size_t resident_bytes = 0;
};

Status read_settings(Settings* settings) {
  std::string fast_math = "0";
  Status status = etm::settings::read_choice("ETMETAL_FAST_MATH", &fast_math);
  if (!status.ok()) return status;
  settings->fast_math = fast_math == "1";
  status = etm::settings::read_text("ETMETAL_CAPTURE", &settings->capture_path);
  if (!status.ok()) return status;
  int64_t resident_mb = 0;
  status = etm::settings::read_integer("ETMETAL_RESIDENT_MB", &resident_mb);
  if (!status.ok()) return status;
  settings->resident_bytes = static_cast<size_t>(resident_mb) << 20;
  return Status();
}

}  // namespace

Status create_metal_device(std::unique_ptr<Device>* out) {
  if (out == nullptr) return Status::error("create_metal_device: null output");
  Settings settings;
  Status status = read_settings(&settings);
  if (!status.ok()) return status;
  const long page_size = sysconf(_SC_PAGESIZE);
  if (page_size <= 0) return Status::error("cannot read the system page size");
  if (@available(macOS 14.0, *)) {
    @autoreleasepool {
      id<MTLDevice> device = MTLCreateSystemDefaultDevice();
      if (device == nil) {
        // Command-line processes without a window server session can get nil here while
        // the GPU is usable: take the first device Metal lists.
        NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
        if (all.count > 0) device = [all objectAtIndex:0];
      }
      if (device == nil) {
        return Status::error("no Metal GPU: MTLCreateSystemDefaultDevice returned nil and "
                             "MTLCopyAllDevices none (a virtual machine without GPU access, or "
                             "a process that may not use the GPU)");
      }
      auto context = std::make_shared<DeviceContext>(device, settings.fast_math,
                                                     settings.resident_bytes,
                                                     static_cast<size_t>(page_size));
      context->residency.create_set(device);
      if (!settings.capture_path.empty()) {
        status = start_capture(device, settings.capture_path);
        if (!status.ok()) return status;
      }
      out->reset(new MetalDevice(std::move(context)));
      return Status();
    }
  }
  return Status::error("the Metal device needs macOS 14 or later (Metal Shading Language 3.1)");
}

void stop_capture() {
  CaptureState& state = capture_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.running) return;
  @autoreleasepool {
    [[MTLCaptureManager sharedCaptureManager] stopCapture];
  }
  state.running = false;
}

}  // namespace etm::device::metal
