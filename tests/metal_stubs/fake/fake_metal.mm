// A fake Metal.framework and Foundation for running native/device/metal/ on Linux (with
// objc_runtime.cpp, the GNUstep 2.0 ABI): the classes and protocols of the stub headers implemented
// on the CPU, with the checks real Metal makes as validation assertions recorded as
// violations instead. Command buffers execute on one worker thread per queue, in commit
// order; kernels are a few known names run in C++:
//   etm_copy_bytes / etm_fill_bytes  the device's own byte kernels (metal_builtin_kernels.h)
//   add_one    buffer(0) float[] += setBytes float at index 1, one element per grid thread
//   fault      makes the command buffer fail with MTLCommandBufferErrorPageFault
//   slow       sleeps 50 ms
// Source containing "#error" fails to compile. MPSGraph graphs run their operations as float64
// loops (the end of this file). This is a model of Metal's documented
// behaviour, written for the tests; it is no substitute for running on a Mac.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

#include "device/metal/metal_builtin_kernels.h"
#include "device/metal/metal_support.h"
#include "fake_metal.h"

namespace {

std::mutex g_mutex;
std::vector<std::string> g_violations;
std::vector<std::string> g_log;
fake_metal::CompileRecord g_last_compile;
size_t g_residency_allocations = 0;
size_t g_residency_commits = 0;
size_t g_residency_requests = 0;
size_t g_queues_with_residency = 0;
size_t g_live_buffers = 0;
bool g_capture_running = false;
uint64_t g_next_buffer_serial = 1;
std::set<uint64_t> g_live_buffer_serials;

void violation(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_violations.push_back(what);
}

void log(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log.push_back(what);
}

std::string size_text(MTLSize size) {
  return std::to_string(size.width) + "x" + std::to_string(size.height) + "x" +
         std::to_string(size.depth);
}

}  // namespace

namespace fake_metal {
CompileRecord last_compile() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_last_compile;
}
std::vector<std::string> violations() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_violations;
}
std::vector<std::string> command_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_log;
}
void clear_logs() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log.clear();
  g_violations.clear();
}
size_t residency_allocations() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_residency_allocations;
}
size_t residency_commits() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_residency_commits;
}
size_t residency_requests() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_residency_requests;
}
size_t queues_with_residency() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_queues_with_residency;
}
size_t live_buffers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_live_buffers;
}
bool capture_running() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_capture_running;
}
}  // namespace fake_metal

// ---------------------------------------------------------------------------------------
// Foundation

@interface FakeString : NSString
- (instancetype)initWithText:(std::string)text;
@end

@implementation FakeString {
  std::string text_;
}
- (instancetype)initWithText:(std::string)text {
  text_ = std::move(text);
  return self;
}
- (const char*)UTF8String {
  return text_.c_str();
}
@end

static NSString* make_string(const std::string& text) {
  return [[FakeString alloc] initWithText:text];
}

@implementation NSString
- (instancetype)initWithBytes:(const void*)bytes
                       length:(NSUInteger)len
                     encoding:(NSStringEncoding)encoding {
  if (encoding != NSUTF8StringEncoding) return nil;
  std::string text(static_cast<const char*>(bytes), len);
  // Enough UTF-8 validation for the tests: no stray continuation or truncated lead bytes.
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (extra == 9 || i + extra >= text.size() + (extra ? 0 : 1)) return nil;
    for (size_t k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 2) return nil;
    i += extra + 1;
  }
  return [[FakeString alloc] initWithText:text];
}
- (const char*)UTF8String {
  return nullptr;
}
- (BOOL)isEqualToString:(NSString*)other {
  return std::strcmp(self.UTF8String, other.UTF8String) == 0;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface FakeArray : NSArray
- (instancetype)initWithObjects:(std::vector<id>)objects;
@end

@implementation FakeArray {
  std::vector<id> objects_;
}
- (instancetype)initWithObjects:(std::vector<id>)objects {
  objects_ = std::move(objects);
  return self;
}
- (NSUInteger)count {
  return objects_.size();
}
- (id)objectAtIndex:(NSUInteger)index {
  return objects_.at(index);
}
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained _Nullable[_Nonnull])buffer
                                    count:(NSUInteger)len {
  NSUInteger n = 0;
  while (state->state < objects_.size() && n < len) buffer[n++] = objects_[state->state++];
  state->itemsPtr = buffer;
  state->mutationsPtr = &state->extra[0];
  return n;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@implementation NSValue
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@implementation NSNumber {
  long long value_;
}
+ (NSNumber*)numberWithLongLong:(long long)value {
  NSNumber* number = [[NSNumber alloc] init];
  number->value_ = value;
  return number;
}
- (long long)longLongValue {
  return value_;
}
@end

@implementation NSArray
+ (instancetype)arrayWithObjects:(const id _Nonnull[_Nonnull])objects count:(NSUInteger)cnt {
  return [[FakeArray alloc] initWithObjects:std::vector<id>(objects, objects + cnt)];
}
- (NSUInteger)count {
  return 0;
}
- (id)objectAtIndex:(NSUInteger)index {
  (void)index;
  return nil;
}
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained _Nullable[_Nonnull])buffer
                                    count:(NSUInteger)len {
  (void)state;
  (void)buffer;
  (void)len;
  return 0;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface FakeObjectDictionary : NSDictionary
- (instancetype)initWithKeys:(std::vector<id>)keys values:(std::vector<id>)values;
@property(readonly) std::vector<std::pair<id, id>> entries;
@end

@implementation NSDictionary
+ (instancetype)dictionaryWithObjects:(const id _Nonnull[_Nullable])objects
                              forKeys:(const id<NSCopying> _Nonnull[_Nullable])keys
                                count:(NSUInteger)cnt {
  std::vector<id> copied_keys;
  for (NSUInteger i = 0; i < cnt; ++i) copied_keys.push_back([keys[i] copyWithZone:nullptr]);
  return [[FakeObjectDictionary alloc] initWithKeys:copied_keys
                                             values:std::vector<id>(objects, objects + cnt)];
}
- (NSUInteger)count {
  return 0;
}
- (id)objectForKey:(id)key {
  (void)key;
  return nil;
}
- (NSArray*)allValues {
  return [[FakeArray alloc] initWithObjects:{}];
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

// A dictionary keyed by strings, in insertion order.
@interface FakeDictionary : NSDictionary
- (instancetype)initWithEntries:(std::vector<std::pair<std::string, id>>)entries;
@end

@implementation FakeDictionary {
  std::vector<std::pair<std::string, id>> entries_;
}
- (instancetype)initWithEntries:(std::vector<std::pair<std::string, id>>)entries {
  entries_ = std::move(entries);
  return self;
}
- (NSUInteger)count {
  return entries_.size();
}
- (id)objectForKey:(id)key {
  const std::string name = static_cast<NSString*>(key).UTF8String;
  for (const auto& entry : entries_)
    if (entry.first == name) return entry.second;
  return nil;
}
- (NSArray*)allValues {
  std::vector<id> values;
  for (const auto& entry : entries_) values.push_back(entry.second);
  return [[FakeArray alloc] initWithObjects:values];
}
@end

// A dictionary keyed by objects (isEqual:), as dictionaryWithObjects:forKeys:count: makes.
@implementation FakeObjectDictionary {
  std::vector<id> keys_;
  std::vector<id> values_;
}
- (instancetype)initWithKeys:(std::vector<id>)keys values:(std::vector<id>)values {
  keys_ = std::move(keys);
  values_ = std::move(values);
  return self;
}
- (NSUInteger)count {
  return keys_.size();
}
- (id)objectForKey:(id)key {
  for (size_t i = 0; i < keys_.size(); ++i)
    if ([keys_[i] isEqual:key]) return values_[i];
  return nil;
}
- (NSArray*)allValues {
  return [[FakeArray alloc] initWithObjects:values_];
}
- (std::vector<std::pair<id, id>>)entries {
  std::vector<std::pair<id, id>> entries;
  for (size_t i = 0; i < keys_.size(); ++i) entries.emplace_back(keys_[i], values_[i]);
  return entries;
}
@end

@interface NSError (Fake)
+ (NSError*)fakeErrorWithDomain:(NSString*)domain
                           code:(NSInteger)code
                    description:(const std::string&)description;
@end

@implementation NSError {
  NSString* domain_;
  NSInteger code_;
  NSString* description_;
}
+ (NSError*)fakeErrorWithDomain:(NSString*)domain
                           code:(NSInteger)code
                    description:(const std::string&)description {
  NSError* error = [[NSError alloc] init];
  error->domain_ = domain;
  error->code_ = code;
  error->description_ = make_string(description);
  return error;
}
- (NSErrorDomain)domain {
  return domain_;
}
- (NSInteger)code {
  return code_;
}
- (NSDictionary*)userInfo {
  return [[NSDictionary alloc] init];
}
- (NSString*)localizedDescription {
  return description_;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface NSURL (FakePath)
- (NSString*)path;
@end

@implementation NSURL {
  NSString* path_;
}
+ (NSURL*)fileURLWithPath:(NSString*)path {
  NSURL* url = [[NSURL alloc] init];
  url->path_ = path;
  return url;
}
- (NSString*)path {
  return path_;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

// ---------------------------------------------------------------------------------------
// Metal

extern "C" NSErrorDomain const MTLCommandBufferErrorDomain = @"MTLCommandBufferErrorDomain";

@interface FakeBuffer : NSObject <MTLBuffer>
- (instancetype)initWithLength:(NSUInteger)length memory:(void*)memory owned:(bool)owned;
@property(readonly) uint64_t serial;
@end

@implementation FakeBuffer {
  void* memory_;
  NSUInteger length_;
  bool owned_;
  uint64_t serial_;
}
- (instancetype)initWithLength:(NSUInteger)length memory:(void*)memory owned:(bool)owned {
  memory_ = memory;
  length_ = length;
  owned_ = owned;
  std::lock_guard<std::mutex> lock(g_mutex);
  serial_ = g_next_buffer_serial++;
  g_live_buffer_serials.insert(serial_);
  ++g_live_buffers;
  return self;
}
- (void)dealloc {
  if (owned_) std::free(memory_);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_live_buffer_serials.erase(serial_);
  --g_live_buffers;
}
- (uint64_t)serial {
  return serial_;
}
- (NSUInteger)length {
  return length_;
}
- (void*)contents {
  return memory_;
}
- (NSUInteger)allocatedSize {
  return length_;
}
- (id<MTLDevice>)device {
  return nil;
}
@end

// A `constant T name [[function_constant(index)]]` declaration of the library's source.
struct DeclaredConstant {
  std::string name;
  MTLDataType type;
  NSUInteger index;
};

@interface MTLFunctionConstant ()
- (instancetype)initWithDeclaration:(const DeclaredConstant&)declaration;
@end

@implementation MTLFunctionConstant {
  DeclaredConstant declaration_;
}
- (instancetype)initWithDeclaration:(const DeclaredConstant&)declaration {
  declaration_ = declaration;
  return self;
}
- (NSString*)name {
  return make_string(declaration_.name);
}
- (MTLDataType)type {
  return declaration_.type;
}
- (NSUInteger)index {
  return declaration_.index;
}
- (BOOL)required {
  return YES;
}
@end

// Values by index, as "<type>:<little-endian hex bytes>".
@interface MTLFunctionConstantValues ()
@property(readonly) std::map<NSUInteger, std::string> values;
@end

@implementation MTLFunctionConstantValues {
  std::map<NSUInteger, std::string> values_;
}
- (void)setConstantValue:(const void*)value type:(MTLDataType)type atIndex:(NSUInteger)index {
  size_t size = 0;
  switch (type) {
    case MTLDataTypeBool: case MTLDataTypeChar: case MTLDataTypeUChar: size = 1; break;
    case MTLDataTypeShort: case MTLDataTypeUShort: case MTLDataTypeHalf: case MTLDataTypeBFloat:
      size = 2;
      break;
    case MTLDataTypeInt: case MTLDataTypeUInt: case MTLDataTypeFloat: size = 4; break;
    case MTLDataTypeLong: case MTLDataTypeULong: size = 8; break;
    default: violation("setConstantValue: unsupported MTLDataType " + std::to_string(type)); return;
  }
  std::string text = std::to_string(type) + ":";
  for (size_t i = 0; i < size; ++i) {
    char digits[3];
    std::snprintf(digits, sizeof digits, "%02x", static_cast<const unsigned char*>(value)[i]);
    text += digits;
  }
  values_[index] = text;
}
- (void)setConstantValue:(const void*)value type:(MTLDataType)type withName:(NSString*)name {
  (void)value;
  (void)type;
  violation(std::string("setConstantValue:withName: ") + name.UTF8String + " is not modelled");
}
- (std::map<NSUInteger, std::string>)values {
  return values_;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface FakeFunction : NSObject <MTLFunction>
- (instancetype)initWithName:(NSString*)name constants:(std::vector<DeclaredConstant>)constants;
@end

@implementation FakeFunction {
  NSString* name_;
  std::vector<DeclaredConstant> constants_;
}
- (instancetype)initWithName:(NSString*)name constants:(std::vector<DeclaredConstant>)constants {
  name_ = name;
  constants_ = std::move(constants);
  return self;
}
- (MTLFunctionType)functionType {
  return std::string(name_.UTF8String) == "helper" ? MTLFunctionTypeVertex : MTLFunctionTypeKernel;
}
- (NSString*)name {
  return name_;
}
- (NSDictionary<NSString*, MTLFunctionConstant*>*)functionConstantsDictionary {
  std::vector<std::pair<std::string, id>> entries;
  for (const DeclaredConstant& constant : constants_)
    entries.emplace_back(constant.name, [[MTLFunctionConstant alloc] initWithDeclaration:constant]);
  return [[FakeDictionary alloc] initWithEntries:entries];
}
@end

@interface FakeLibrary : NSObject <MTLLibrary>
- (instancetype)initWithNames:(std::vector<std::string>)names
                    constants:(std::vector<DeclaredConstant>)constants;
@end

// Every function of a fake library sees all of the source's function constants.
@implementation FakeLibrary {
  std::vector<std::string> names_;
  std::vector<DeclaredConstant> constants_;
}
- (instancetype)initWithNames:(std::vector<std::string>)names
                    constants:(std::vector<DeclaredConstant>)constants {
  names_ = std::move(names);
  constants_ = std::move(constants);
  return self;
}
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName {
  for (const std::string& name : names_)
    if (name == functionName.UTF8String)
      return [[FakeFunction alloc] initWithName:functionName constants:constants_];
  return nil;
}
// Logs "specialize <name> <index>=<type>:<bytes> ..."; a constant left unset fails, as
// Metal fails for a required constant.
- (id<MTLFunction>)newFunctionWithName:(NSString*)functionName
                        constantValues:(MTLFunctionConstantValues*)constantValues
                                 error:(NSError**)error {
  id<MTLFunction> function = [self newFunctionWithName:functionName];
  if (function == nil) return nil;
  const std::map<NSUInteger, std::string> values = constantValues.values;
  std::string entry = std::string("specialize ") + functionName.UTF8String;
  for (const DeclaredConstant& constant : constants_) {
    auto found = values.find(constant.index);
    if (found == values.end()) {
      if (error)
        *error = [NSError fakeErrorWithDomain:make_string("MTLLibraryErrorDomain")
                                         code:3
                                  description:"function constant '" + constant.name +
                                              "' has no value"];
      return nil;
    }
    entry += " " + std::to_string(constant.index) + "=" + found->second;
  }
  log(entry);
  return function;
}
- (NSArray<NSString*>*)functionNames {
  std::vector<id> names;
  for (const std::string& name : names_) names.push_back(make_string(name));
  return [[FakeArray alloc] initWithObjects:names];
}
@end

@interface FakePipeline : NSObject <MTLComputePipelineState>
- (instancetype)initWithName:(std::string)name;
@property(readonly) std::string kernelName;
@end

@implementation FakePipeline {
  std::string name_;
}
- (instancetype)initWithName:(std::string)name {
  name_ = std::move(name);
  return self;
}
- (std::string)kernelName {
  return name_;
}
- (NSUInteger)maxTotalThreadsPerThreadgroup {
  return 1024;
}
- (NSUInteger)threadExecutionWidth {
  return 32;
}
- (NSUInteger)staticThreadgroupMemoryLength {
  return name_ == "add_one" ? 64 : 0;
}
@end

@interface MTLCompileOptions (FakeRecord)
- (fake_metal::CompileRecord)record;
@end

@implementation MTLCompileOptions {
  MTLLanguageVersion languageVersion_;
  MTLMathMode mathMode_;
  MTLMathFloatingPointFunctions mathFloatingPointFunctions_;
  BOOL fastMathEnabled_;
  bool mathModeSet_;
}
- (instancetype)init {
  languageVersion_ = MTLLanguageVersion3_0;
  mathMode_ = MTLMathModeFast;
  mathFloatingPointFunctions_ = MTLMathFloatingPointFunctionsFast;
  fastMathEnabled_ = YES;
  mathModeSet_ = false;
  return self;
}
- (MTLLanguageVersion)languageVersion {
  return languageVersion_;
}
- (void)setLanguageVersion:(MTLLanguageVersion)version {
  languageVersion_ = version;
}
- (MTLMathMode)mathMode {
  return mathMode_;
}
- (void)setMathMode:(MTLMathMode)mode {
  mathMode_ = mode;
  mathModeSet_ = true;
}
- (MTLMathFloatingPointFunctions)mathFloatingPointFunctions {
  return mathFloatingPointFunctions_;
}
- (void)setMathFloatingPointFunctions:(MTLMathFloatingPointFunctions)functions {
  mathFloatingPointFunctions_ = functions;
}
- (BOOL)fastMathEnabled {
  return fastMathEnabled_;
}
- (void)setFastMathEnabled:(BOOL)enabled {
  fastMathEnabled_ = enabled;
}
- (fake_metal::CompileRecord)record {
  fake_metal::CompileRecord record;
  record.language_version = languageVersion_;
  record.math_mode_set = mathModeSet_;
  record.math_mode = mathMode_;
  record.floating_point_functions = mathFloatingPointFunctions_;
  record.fast_math_enabled = fastMathEnabled_;
  return record;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

// One bound argument of a dispatch, captured at encoding time (unretained, like Metal's
// command buffers without retained references).
struct FakeBinding {
  char* address = nullptr;
  uint64_t buffer_serial = 0;  // 0 for setBytes
  std::vector<char> bytes;
};

struct FakeCommandBufferState {
  std::vector<std::function<void(std::string* failure)>> commands;
  std::vector<MTLCommandBufferHandler> handlers;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
};

@interface FakeComputeEncoder : NSObject <MTLComputeCommandEncoder>
- (instancetype)initWithState:(std::shared_ptr<FakeCommandBufferState>)state;
@property(readonly) bool ended;
@end

@implementation FakeComputeEncoder {
  std::shared_ptr<FakeCommandBufferState> state_;
  std::map<NSUInteger, FakeBinding> bindings_;
  FakePipeline* pipeline_;
  bool ended_;
}
- (instancetype)initWithState:(std::shared_ptr<FakeCommandBufferState>)state {
  state_ = std::move(state);
  ended_ = false;
  return self;
}
- (bool)ended {
  return ended_;
}
- (void)dealloc {
  if (!ended_) violation("compute encoder released without endEncoding");
}
- (bool)usable:(const char*)what {
  if (ended_) violation(std::string(what) + " after endEncoding");
  return !ended_;
}
- (void)endEncoding {
  if (ended_) violation("endEncoding twice");
  ended_ = true;
  log("end");
}
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state {
  if (![self usable:"setComputePipelineState"]) return;
  pipeline_ = (FakePipeline*)state;
  log("pipeline " + pipeline_.kernelName);
}
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index {
  if (![self usable:"setBuffer"]) return;
  if (index >= 31) violation("setBuffer index " + std::to_string(index));
  FakeBinding binding;
  if (buffer == nil) {  // legal in Metal: the kernel must not read it
    bindings_[index] = binding;
    log("buffer " + std::to_string(index) + " nil");
    return;
  }
  if (offset > buffer.length) violation("setBuffer offset past the end");
  @autoreleasepool {
    binding.address = static_cast<char*>(buffer.contents) + offset;
  }
  binding.buffer_serial = ((FakeBuffer*)buffer).serial;
  bindings_[index] = binding;
  log("buffer " + std::to_string(index) + " +" + std::to_string(offset));
}
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index {
  if (![self usable:"setBytes"]) return;
  if (index >= 31) violation("setBytes index " + std::to_string(index));
  if (length > 4096) violation("setBytes of " + std::to_string(length) + " bytes");
  FakeBinding binding;
  binding.bytes.assign(static_cast<const char*>(bytes), static_cast<const char*>(bytes) + length);
  bindings_[index] = binding;
  log("bytes " + std::to_string(index) + " " + std::to_string(length));
}
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index {
  if (![self usable:"setThreadgroupMemoryLength"]) return;
  if (length % 16 != 0) violation("threadgroup memory length not a multiple of 16");
  if (length > 32768) violation("threadgroup memory over 32 KiB");
  log("threadgroup " + std::to_string(index) + " " + std::to_string(length));
}
- (void)dispatch:(MTLSize)threads group:(MTLSize)group kind:(const char*)kind {
  if (![self usable:kind]) return;
  if (pipeline_ == nil) {
    violation(std::string(kind) + " without a pipeline");
    return;
  }
  const NSUInteger group_volume = group.width * group.height * group.depth;
  if (group_volume == 0 || group_volume > pipeline_.maxTotalThreadsPerThreadgroup)
    violation(std::string(kind) + " with threadgroup " + size_text(group));
  if (threads.width * threads.height * threads.depth == 0)
    violation(std::string(kind) + " with an empty grid");
  log(std::string(kind) + " " + size_text(threads) + " " + size_text(group));
  const std::string name = pipeline_.kernelName;
  std::map<NSUInteger, FakeBinding> bindings = bindings_;
  const uint64_t count = threads.width * threads.height * threads.depth;
  state_->commands.push_back([name, bindings, count](std::string* failure) {
    auto address = [&](NSUInteger index) -> char* {
      auto it = bindings.find(index);
      if (it == bindings.end()) {
        violation(name + ": argument " + std::to_string(index) + " unbound");
        return nullptr;
      }
      FakeBinding& binding = const_cast<FakeBinding&>(it->second);
      if (binding.buffer_serial) {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (!g_live_buffer_serials.count(binding.buffer_serial)) {
          g_violations.push_back(name + ": buffer released before the GPU used it");
          return nullptr;
        }
        return binding.address;
      }
      return binding.bytes.data();
    };
    if (name == etm::device::metal::kCopyBytesKernel) {
      char* source = address(0);
      char* destination = address(1);
      auto* arguments = reinterpret_cast<etm::device::metal::ByteCopyArguments*>(address(2));
      if (source && destination && arguments)
        std::memmove(destination + arguments->destination_offset,
                     source + arguments->source_offset, arguments->length);
    } else if (name == etm::device::metal::kFillBytesKernel) {
      char* destination = address(0);
      auto* arguments = reinterpret_cast<etm::device::metal::ByteFillArguments*>(address(1));
      if (destination && arguments)
        std::memset(destination + arguments->offset, static_cast<int>(arguments->value),
                    arguments->length);
    } else if (name == "add_one") {
      auto* data = reinterpret_cast<float*>(address(0));
      auto* addend = reinterpret_cast<float*>(address(1));
      if (data && addend)
        for (uint64_t i = 0; i < count; ++i) data[i] += *addend;
    } else if (name == "fault") {
      *failure = "page fault";
    } else if (name == "slow") {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}
- (void)dispatchThreads:(MTLSize)threadsPerGrid threadsPerThreadgroup:(MTLSize)group {
  [self dispatch:threadsPerGrid group:group kind:"dispatch_threads"];
}
- (void)dispatchThreadgroups:(MTLSize)groups threadsPerThreadgroup:(MTLSize)group {
  MTLSize threads = {groups.width * group.width, groups.height * group.height,
                     groups.depth * group.depth};
  [self dispatch:threads group:group kind:"dispatch_threadgroups"];
}
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope {
  if (![self usable:"memoryBarrierWithScope"]) return;
  log(scope == MTLBarrierScopeBuffers ? "barrier" : "barrier other scope");
}
@end

@interface FakeBlitEncoder : NSObject <MTLBlitCommandEncoder>
- (instancetype)initWithState:(std::shared_ptr<FakeCommandBufferState>)state;
@property(readonly) bool ended;
@end

@implementation FakeBlitEncoder {
  std::shared_ptr<FakeCommandBufferState> state_;
  bool ended_;
}
- (instancetype)initWithState:(std::shared_ptr<FakeCommandBufferState>)state {
  state_ = std::move(state);
  ended_ = false;
  return self;
}
- (bool)ended {
  return ended_;
}
- (void)dealloc {
  if (!ended_) violation("blit encoder released without endEncoding");
}
- (void)endEncoding {
  if (ended_) violation("endEncoding twice");
  ended_ = true;
  log("end");
}
- (void)copyFromBuffer:(id<MTLBuffer>)source
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destination
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size {
  if (ended_) violation("copyFromBuffer after endEncoding");
  // macOS: offsets and size multiples of 4 (MTLBlitCommandEncoder documentation).
  if (sourceOffset % 4 || destinationOffset % 4 || size % 4) violation("unaligned blit copy");
  // Metal fails larger copies without an error; the device must split them.
  if (size > (NSUInteger{1} << 31)) violation("blit copy of more than 2 GiB");
  if (sourceOffset + size > source.length || destinationOffset + size > destination.length)
    violation("blit copy out of range");
  log("copy " + std::to_string(sourceOffset) + "->" + std::to_string(destinationOffset) + " " +
      std::to_string(size));
  char* from = nullptr;
  char* to = nullptr;
  @autoreleasepool {  // contents is an inner pointer: ARC autoreleases the buffer
    from = static_cast<char*>(source.contents) + sourceOffset;
    to = static_cast<char*>(destination.contents) + destinationOffset;
  }
  const uint64_t serials[2] = {((FakeBuffer*)source).serial, ((FakeBuffer*)destination).serial};
  state_->commands.push_back([from, to, size, serials](std::string*) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (!g_live_buffer_serials.count(serials[0]) || !g_live_buffer_serials.count(serials[1])) {
        g_violations.push_back("copy: buffer released before the GPU used it");
        return;
      }
    }
    std::memmove(to, from, size);
  });
}
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value {
  if (ended_) violation("fillBuffer after endEncoding");
  if (range.location % 4 || range.length % 4) violation("unaligned blit fill");
  if (range.length == 0) violation("empty blit fill");
  log("fill " + std::to_string(range.location) + " " + std::to_string(range.length) + " " +
      std::to_string(value));
  char* to = nullptr;
  @autoreleasepool {
    to = static_cast<char*>(buffer.contents) + range.location;
  }
  const NSUInteger length = range.length;
  state_->commands.push_back([to, length, value](std::string*) { std::memset(to, value, length); });
}
@end

@class FakeCommandQueue;

@interface FakeCommandBuffer : NSObject <MTLCommandBuffer>
- (instancetype)initWithQueue:(FakeCommandQueue*)queue;
- (void)execute;
// Work encoded outside any encoder of ours (MPSGraph's), run in order with the rest.
- (void)appendCommand:(std::function<void(std::string*)>)command;
@property(readonly) FakeCommandQueue* queue;
@end

@interface FakeCommandQueue : NSObject <MTLCommandQueue>
- (void)submit:(FakeCommandBuffer*)commandBuffer;
@end

static CFTimeInterval steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

@implementation FakeCommandBuffer {
  FakeCommandQueue* strongQueue_;  // until committed: a queue outlives its work
  FakeCommandQueue* __weak queue_;
  std::shared_ptr<FakeCommandBufferState> state_;
  FakeComputeEncoder* __weak compute_;  // the encoders handed out, to check they ended
  FakeBlitEncoder* __weak blit_;
  MTLCommandBufferStatus status_;
  NSError* error_;
  CFTimeInterval gpuStart_;  // the host's steady clock in seconds, as Metal's mach time
  CFTimeInterval gpuEnd_;
}
- (instancetype)initWithQueue:(FakeCommandQueue*)queue {
  strongQueue_ = queue;
  queue_ = queue;
  state_ = std::make_shared<FakeCommandBufferState>();
  status_ = MTLCommandBufferStatusNotEnqueued;
  return self;
}
- (bool)encoderOpen {
  FakeComputeEncoder* compute = compute_;
  FakeBlitEncoder* blit = blit_;
  return (compute != nil && !compute.ended) || (blit != nil && !blit.ended);
}
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)type {
  if (status_ != MTLCommandBufferStatusNotEnqueued) violation("encoding after commit");
  if ([self encoderOpen]) violation("new encoder while another is open");
  log(type == MTLDispatchTypeConcurrent ? "compute concurrent" : "compute serial");
  FakeComputeEncoder* encoder = [[FakeComputeEncoder alloc] initWithState:state_];
  compute_ = encoder;
  return encoder;
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
  if (status_ != MTLCommandBufferStatusNotEnqueued) violation("encoding after commit");
  if ([self encoderOpen]) violation("new encoder while another is open");
  log("blit");
  FakeBlitEncoder* encoder = [[FakeBlitEncoder alloc] initWithState:state_];
  blit_ = encoder;
  return encoder;
}
- (FakeCommandQueue*)queue {
  return queue_;
}
- (void)appendCommand:(std::function<void(std::string*)>)command {
  if (status_ != MTLCommandBufferStatusNotEnqueued) violation("encoding after commit");
  if ([self encoderOpen]) violation("graph encoded while an encoder is open");
  state_->commands.push_back(std::move(command));
}
- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
  if (status_ != MTLCommandBufferStatusNotEnqueued) violation("addCompletedHandler after commit");
  state_->handlers.push_back(block);
}
- (void)commit {
  if (status_ != MTLCommandBufferStatusNotEnqueued) violation("commit twice");
  if ([self encoderOpen]) violation("commit with an open encoder");
  status_ = MTLCommandBufferStatusCommitted;
  log("commit");
  [strongQueue_ submit:self];
  strongQueue_ = nil;
}
- (void)execute {
  std::string failure;
  gpuStart_ = steadySeconds();
  for (auto& command : state_->commands) {
    command(&failure);
    if (!failure.empty()) break;
  }
  gpuEnd_ = steadySeconds();
  if (failure.empty()) {
    status_ = MTLCommandBufferStatusCompleted;
  } else {
    status_ = MTLCommandBufferStatusError;
    error_ = [NSError fakeErrorWithDomain:MTLCommandBufferErrorDomain
                                     code:MTLCommandBufferErrorPageFault
                              description:"Discarded (victim of GPU error/recovery)"];
  }
  for (MTLCommandBufferHandler handler : state_->handlers) handler(self);
  state_->handlers.clear();
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->done = true;
  state_->done_cv.notify_all();
}
- (void)waitUntilCompleted {
  if (status_ == MTLCommandBufferStatusNotEnqueued) violation("waitUntilCompleted before commit");
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
}
- (MTLCommandBufferStatus)status {
  return status_;
}
- (NSError*)error {
  return error_;
}
- (CFTimeInterval)GPUStartTime {
  return gpuStart_;
}
- (CFTimeInterval)GPUEndTime {
  return gpuEnd_;
}
@end

@implementation FakeCommandQueue {
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<FakeCommandBuffer*> pending_;
  std::thread worker_;
}
// The worker keeps its queue alive and runs until the process ends, like Metal's.
- (instancetype)init {
  worker_ = std::thread([self] {
    for (;;) {
      FakeCommandBuffer* next = nil;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !pending_.empty(); });
        next = pending_.front();
        pending_.pop_front();
      }
      @autoreleasepool {
        [next execute];
      }
    }
  });
  return self;
}
- (void)submit:(FakeCommandBuffer*)commandBuffer {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(commandBuffer);
  cv_.notify_one();
}
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences {
  return [[FakeCommandBuffer alloc] initWithQueue:self];
}
- (void)addResidencySet:(id<MTLResidencySet>)residencySet {
  (void)residencySet;
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_queues_with_residency;
}
@end

@implementation MTLResidencySetDescriptor {
  NSString* label_;
  NSUInteger initialCapacity_;
}
- (NSString*)label {
  return label_;
}
- (void)setLabel:(NSString*)label {
  label_ = label;
}
- (NSUInteger)initialCapacity {
  return initialCapacity_;
}
- (void)setInitialCapacity:(NSUInteger)capacity {
  initialCapacity_ = capacity;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface FakeResidencySet : NSObject <MTLResidencySet>
@end

@implementation FakeResidencySet {
  std::set<uint64_t> members_;
  uint64_t allocated_;
}
- (void)addAllocation:(id<MTLAllocation>)allocation {
  FakeBuffer* buffer = (FakeBuffer*)allocation;
  if (!members_.insert(buffer.serial).second) violation("allocation added twice");
  allocated_ += buffer.allocatedSize;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_residency_allocations = members_.size();
}
- (void)removeAllocation:(id<MTLAllocation>)allocation {
  FakeBuffer* buffer = (FakeBuffer*)allocation;
  if (!members_.erase(buffer.serial)) violation("removing an allocation not in the set");
  allocated_ -= buffer.allocatedSize;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_residency_allocations = members_.size();
}
- (void)commit {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_residency_commits;
}
- (void)requestResidency {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_residency_requests;
}
- (uint64_t)allocatedSize {
  return allocated_;
}
@end

@implementation MTLArchitecture
- (NSString*)name {
  return make_string("applegpu_g13s");
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface FakeDevice : NSObject <MTLDevice>
@end

@implementation FakeDevice
- (NSString*)name {
  return make_string("Fake Apple M1 Max");
}
- (MTLArchitecture*)architecture {
  return [[MTLArchitecture alloc] init];
}
- (uint64_t)recommendedMaxWorkingSetSize {
  return uint64_t{1} << 20;  // 1 MiB: small, so tests reach the residency cap
}
- (NSUInteger)maxBufferLength {
  return NSUInteger{1} << 24;
}
- (NSUInteger)maxThreadgroupMemoryLength {
  return 32768;
}
- (id<MTLCommandQueue>)newCommandQueue {
  return [[FakeCommandQueue alloc] init];
}
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options {
  if ((options & (MTLResourceStorageModeManaged | MTLResourceStorageModePrivate)) != 0)
    violation("buffer not in shared storage");
  void* memory = std::calloc(1, length);
  return [[FakeBuffer alloc] initWithLength:length memory:memory owned:true];
}
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void*, NSUInteger))deallocator {
  (void)options;
  (void)deallocator;
  const uintptr_t page = 16384;
  if (reinterpret_cast<uintptr_t>(pointer) % page || length % page || length == 0) {
    violation("newBufferWithBytesNoCopy with an unaligned region");
    return nil;
  }
  return [[FakeBuffer alloc] initWithLength:length memory:pointer owned:false];
}
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                               options:(MTLCompileOptions*)options
                                 error:(__autoreleasing NSError**)error {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_last_compile = [options record];
  }
  const std::string text = source.UTF8String;
  if (text.find("#error") != std::string::npos) {
    if (error) {
      *error = [NSError fakeErrorWithDomain:make_string("MTLLibraryErrorDomain")
                                       code:3
                                description:"program_source:2:2: error: fake failure"];
    }
    return nil;
  }
  std::vector<std::string> names;
  const std::regex kernel(R"(kernel\s+void\s+(\w+))");
  for (std::sregex_iterator it(text.begin(), text.end(), kernel), end; it != end; ++it)
    names.push_back((*it)[1]);
  if (text.find("helper") != std::string::npos) names.push_back("helper");
  const std::map<std::string, MTLDataType> types = {
      {"bool", MTLDataTypeBool},   {"char", MTLDataTypeChar},     {"uchar", MTLDataTypeUChar},
      {"short", MTLDataTypeShort}, {"ushort", MTLDataTypeUShort}, {"int", MTLDataTypeInt},
      {"uint", MTLDataTypeUInt},   {"long", MTLDataTypeLong},     {"ulong", MTLDataTypeULong},
      {"float", MTLDataTypeFloat}, {"half", MTLDataTypeHalf},     {"bfloat", MTLDataTypeBFloat}};
  std::vector<DeclaredConstant> constants;
  const std::regex constant(R"(constant\s+(\w+)\s+(\w+)\s*\[\[\s*function_constant\((\d+)\)\s*\]\])");
  for (std::sregex_iterator it(text.begin(), text.end(), constant), end; it != end; ++it) {
    auto type = types.find((*it)[1]);
    if (type == types.end()) continue;
    constants.push_back({(*it)[2], type->second, std::stoul((*it)[3])});
  }
  return [[FakeLibrary alloc] initWithNames:names constants:constants];
}
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function
                                                             error:(__autoreleasing NSError**)error {
  (void)error;
  return [[FakePipeline alloc] initWithName:function.name.UTF8String];
}
- (id<MTLResidencySet>)newResidencySetWithDescriptor:(MTLResidencySetDescriptor*)desc
                                               error:(__autoreleasing NSError**)error {
  (void)error;
  if (desc.label == nil) violation("residency set without a label");
  if (std::getenv("FAKE_METAL_NO_RESIDENCY_SET")) return nil;  // as on paravirtual GPUs
  return [[FakeResidencySet alloc] init];
}
@end

extern "C" id<MTLDevice> MTLCreateSystemDefaultDevice(void) {
  if (std::getenv("FAKE_METAL_NO_DEVICE") || std::getenv("FAKE_METAL_NO_DEFAULT_DEVICE")) return nil;
  return [[FakeDevice alloc] init];
}

// FAKE_METAL_NO_DEFAULT_DEVICE: a command-line tool that gets no default device but whose
// GPU Metal still lists.
extern "C" NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) {
  if (std::getenv("FAKE_METAL_NO_DEVICE")) return [[FakeArray alloc] initWithObjects:{}];
  return [[FakeArray alloc] initWithObjects:{[[FakeDevice alloc] init]}];
}

@implementation MTLCaptureDescriptor {
  id captureObject_;
  MTLCaptureDestination destination_;
  NSURL* outputURL_;
}
- (id)captureObject {
  return captureObject_;
}
- (void)setCaptureObject:(id)object {
  captureObject_ = object;
}
- (MTLCaptureDestination)destination {
  return destination_;
}
- (void)setDestination:(MTLCaptureDestination)destination {
  destination_ = destination;
}
- (NSURL*)outputURL {
  return outputURL_;
}
- (void)setOutputURL:(NSURL*)url {
  outputURL_ = url;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@implementation MTLCaptureManager {
  std::string path_;
}
+ (MTLCaptureManager*)sharedCaptureManager {
  static MTLCaptureManager* shared = [[MTLCaptureManager alloc] init];
  return shared;
}
- (BOOL)supportsDestination:(MTLCaptureDestination)destination {
  const char* enabled = std::getenv("MTL_CAPTURE_ENABLED");
  return destination == MTLCaptureDestinationDeveloperTools ||
         (enabled && std::string(enabled) == "1");
}
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor*)descriptor
                             error:(__autoreleasing NSError**)error {
  if (descriptor.captureObject == nil) violation("capture without a capture object");
  const std::string path = descriptor.outputURL.path.UTF8String;
  struct stat existing;
  if (stat(path.c_str(), &existing) == 0) {
    if (error) {
      *error = [NSError fakeErrorWithDomain:make_string("MTLCaptureErrorDomain")
                                       code:3
                                description:"Capture file already exists"];
    }
    return NO;
  }
  if (mkdir(path.c_str(), 0755) != 0) violation("cannot create the trace");
  path_ = path;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_capture_running = true;
  return YES;
}
- (void)stopCapture {
  FILE* marker = std::fopen((path_ + "/stopped").c_str(), "w");
  if (marker) std::fclose(marker);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_capture_running = false;
}
- (BOOL)isCapturing {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_capture_running;
}
@end

// ---------------------------------------------------------------------------------------
// MetalPerformanceShaders and MPSGraph: graphs record their operations and run them as a
// float64 reference when the command buffer executes. FAKE_METAL_GRAPH_COMMITS=1 makes each
// encode commit the work so far and continue in a new command buffer, as MPSGraph may.

namespace {

size_t g_graphs_built = 0;

struct GraphNode {
  enum class Kind { placeholder, constant, matmul, transpose, reshape, multiply, add, convolution };
  Kind kind = Kind::placeholder;
  std::vector<int64_t> shape;
  MPSDataType type = MPSDataTypeInvalid;
  std::vector<std::shared_ptr<GraphNode>> inputs;
  double scalar = 0;
  NSUInteger dimensions[2] = {0, 0};                                          // transpose
  NSUInteger stride[2] = {1, 1}, dilation[2] = {1, 1}, padding[4] = {0, 0, 0, 0}, groups = 1;  // (x, y); l r t b
};

int64_t volume(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  return n;
}

std::vector<int64_t> shape_of(NSArray<NSNumber*>* shape) {
  std::vector<int64_t> sizes;
  for (NSUInteger i = 0; i < shape.count; ++i) sizes.push_back([shape objectAtIndex:i].longLongValue);
  return sizes;
}

size_t element_bytes(MPSDataType type) { return type == MPSDataTypeFloat32 ? 4 : 2; }

double load_element(const char* address, MPSDataType type) {
  if (type == MPSDataTypeFloat32) {
    float value;
    std::memcpy(&value, address, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, address, 2);
  if (type == MPSDataTypeBFloat16) {
    const uint32_t wide = uint32_t{bits} << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

void store_element(char* address, MPSDataType type, double value) {
  const float narrow = static_cast<float>(value);
  if (type == MPSDataTypeFloat32) {
    std::memcpy(address, &narrow, 4);
    return;
  }
  uint16_t bits;
  if (type == MPSDataTypeBFloat16) {
    uint32_t wide;
    std::memcpy(&wide, &narrow, 4);
    bits = static_cast<uint16_t>((wide + 0x7fffu + ((wide >> 16) & 1u)) >> 16);
  } else {
    bits = etm::device::metal::support::float_to_half_bits(narrow);
  }
  std::memcpy(address, &bits, 2);
}

// Row-major strides of `shape`, with 0 where `shape` broadcasts (size 1) against `target`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& target) {
  std::vector<int64_t> strides(target.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t from_end = shape.size() - 1 - i;
    const size_t d = target.size() - 1 - i;
    strides[d] = shape[from_end] == 1 ? 0 : stride;
    stride *= shape[from_end];
  }
  return strides;
}

using GraphValues = std::map<const GraphNode*, std::vector<double>>;

std::vector<double> evaluate(const GraphNode& node, GraphValues& values) {
  auto known = values.find(&node);
  if (known != values.end()) return known->second;
  std::vector<std::vector<double>> in;
  for (const auto& input : node.inputs) in.push_back(evaluate(*input, values));
  std::vector<double> out(static_cast<size_t>(volume(node.shape)));
  const std::vector<int64_t>& shape = node.shape;
  const size_t rank = shape.size();
  switch (node.kind) {
    case GraphNode::Kind::placeholder:
      violation("graph placeholder without a feed");
      break;
    case GraphNode::Kind::constant:
      out.assign(1, node.scalar);
      break;
    case GraphNode::Kind::matmul: {
      const std::vector<int64_t>& a = node.inputs[0]->shape;
      const int64_t M = shape[rank - 2], N = shape[rank - 1], K = a[a.size() - 1];
      const int64_t batches = volume(shape) / (M * N);
      for (int64_t b = 0; b < batches; ++b)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < K; ++k) sum += in[0][(b * M + m) * K + k] * in[1][(b * K + k) * N + n];
            out[(b * M + m) * N + n] = sum;
          }
      break;
    }
    case GraphNode::Kind::transpose: {
      const std::vector<int64_t>& from = node.inputs[0]->shape;
      std::vector<int64_t> from_strides = broadcast_strides(from, from);
      std::swap(from_strides[node.dimensions[0]], from_strides[node.dimensions[1]]);
      for (int64_t i = 0; i < volume(shape); ++i) {
        int64_t rest = i, offset = 0;
        for (size_t d = rank; d-- > 0;) {
          offset += (rest % shape[d]) * from_strides[d];
          rest /= shape[d];
        }
        out[i] = in[0][offset];
      }
      break;
    }
    case GraphNode::Kind::reshape:
      out = in[0];
      break;
    case GraphNode::Kind::multiply:
    case GraphNode::Kind::add: {
      const std::vector<int64_t> a = broadcast_strides(node.inputs[0]->shape, shape);
      const std::vector<int64_t> b = broadcast_strides(node.inputs[1]->shape, shape);
      for (int64_t i = 0; i < volume(shape); ++i) {
        int64_t rest = i, ia = 0, ib = 0;
        for (size_t d = rank; d-- > 0;) {
          const int64_t index = rest % shape[d];
          ia += index * a[d];
          ib += index * b[d];
          rest /= shape[d];
        }
        out[i] = node.kind == GraphNode::Kind::add ? in[0][ia] + in[1][ib] : in[0][ia] * in[1][ib];
      }
      break;
    }
    case GraphNode::Kind::convolution: {
      const std::vector<int64_t>& x = node.inputs[0]->shape;  // N C H W
      const std::vector<int64_t>& w = node.inputs[1]->shape;  // O C/g kH kW
      const int64_t C = x[1], H = x[2], W = x[3], O = w[0], Cg = w[1], kH = w[2], kW = w[3];
      const int64_t OH = shape[2], OW = shape[3], groups = static_cast<int64_t>(node.groups);
      const int64_t per_group = O / groups;
      for (int64_t n = 0; n < shape[0]; ++n)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t oy = 0; oy < OH; ++oy)
            for (int64_t ox = 0; ox < OW; ++ox) {
              double sum = 0;
              const int64_t g = o / per_group;
              for (int64_t c = 0; c < Cg; ++c)
                for (int64_t ky = 0; ky < kH; ++ky)
                  for (int64_t kx = 0; kx < kW; ++kx) {
                    const int64_t iy = oy * int64_t(node.stride[1]) - int64_t(node.padding[2]) + ky * int64_t(node.dilation[1]);
                    const int64_t ix = ox * int64_t(node.stride[0]) - int64_t(node.padding[0]) + kx * int64_t(node.dilation[0]);
                    if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                    sum += in[0][((n * C + g * Cg + c) * H + iy) * W + ix] * in[1][((o * Cg + c) * kH + ky) * kW + kx];
                  }
              out[((n * O + o) * OH + oy) * OW + ox] = sum;
            }
      break;
    }
  }
  values[&node] = out;
  return out;
}

}  // namespace

namespace fake_metal {
size_t graphs_built() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_graphs_built;
}
}  // namespace fake_metal

@implementation MPSCommandBuffer {
  id<MTLCommandBuffer> inner_;
}
+ (instancetype)commandBufferWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer {
  MPSCommandBuffer* wrapper = [[MPSCommandBuffer alloc] init];
  wrapper->inner_ = commandBuffer;
  log("mps command buffer");
  return wrapper;
}
- (id<MTLCommandBuffer>)commandBuffer {
  return inner_;
}
- (void)commitAndContinue {
  FakeCommandQueue* queue = ((FakeCommandBuffer*)inner_).queue;
  [inner_ commit];
  inner_ = [queue commandBufferWithUnretainedReferences];
}
- (void)commit {
  [inner_ commit];
}
- (void)addCompletedHandler:(MTLCommandBufferHandler)block {
  [inner_ addCompletedHandler:block];
}
- (void)waitUntilCompleted {
  [inner_ waitUntilCompleted];
}
- (MTLCommandBufferStatus)status {
  return inner_.status;
}
- (NSError*)error {
  return inner_.error;
}
- (CFTimeInterval)GPUStartTime {
  return inner_.GPUStartTime;
}
- (CFTimeInterval)GPUEndTime {
  return inner_.GPUEndTime;
}
- (id<MTLBlitCommandEncoder>)blitCommandEncoder {
  return [inner_ blitCommandEncoder];
}
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)dispatchType {
  return [inner_ computeCommandEncoderWithDispatchType:dispatchType];
}
@end

@interface MPSNDArrayDescriptor ()
@property(readonly) MPSDataType dataType;
@property(readonly) std::vector<int64_t> sizes;
@end

@implementation MPSNDArrayDescriptor {
  MPSDataType dataType_;
  std::vector<int64_t> sizes_;
  BOOL preferPackedRows_;
}
- (BOOL)preferPackedRows {
  return preferPackedRows_;
}
- (void)setPreferPackedRows:(BOOL)preferPackedRows {
  preferPackedRows_ = preferPackedRows;
}
+ (instancetype)descriptorWithDataType:(MPSDataType)dataType shape:(NSArray<NSNumber*>*)shape {
  MPSNDArrayDescriptor* descriptor = [[MPSNDArrayDescriptor alloc] init];
  descriptor->dataType_ = dataType;
  descriptor->sizes_ = shape_of(shape);
  return descriptor;
}
- (MPSDataType)dataType {
  return dataType_;
}
- (std::vector<int64_t>)sizes {
  return sizes_;
}
@end

@interface MPSNDArray ()
@property(readonly) FakeBuffer* buffer;
@property(readonly) NSUInteger offset;
@property(readonly) MPSNDArrayDescriptor* descriptor;
@end

@implementation MPSNDArray {
  FakeBuffer* buffer_;
  NSUInteger offset_;
  MPSNDArrayDescriptor* descriptor_;
}
- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset descriptor:(MPSNDArrayDescriptor*)descriptor {
  buffer_ = (FakeBuffer*)buffer;
  offset_ = offset;
  descriptor_ = descriptor;
  const uint64_t bytes = static_cast<uint64_t>(volume(descriptor.sizes)) * element_bytes(descriptor.dataType);
  if (offset % element_bytes(descriptor.dataType) != 0) violation("MPSNDArray at an offset that splits an element");
  // Without packed rows MPS may assume rows padded to its own alignment: the fake reads
  // packed rows only.
  if (!descriptor.preferPackedRows) violation("MPSNDArray over a buffer without preferPackedRows");
  if (offset > buffer.length || bytes > buffer.length - offset) violation("MPSNDArray past the end of its buffer");
  return self;
}
- (FakeBuffer*)buffer {
  return buffer_;
}
- (NSUInteger)offset {
  return offset_;
}
- (MPSNDArrayDescriptor*)descriptor {
  return descriptor_;
}
@end

@implementation MPSGraphObject
@end

@implementation MPSGraphOperation
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface MPSGraphTensor ()
- (instancetype)initWithNode:(std::shared_ptr<GraphNode>)node;
@property(readonly) std::shared_ptr<GraphNode> node;
@end

@implementation MPSGraphTensor {
  std::shared_ptr<GraphNode> node_;
}
- (instancetype)initWithNode:(std::shared_ptr<GraphNode>)node {
  node_ = std::move(node);
  return self;
}
- (std::shared_ptr<GraphNode>)node {
  return node_;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

@interface MPSGraphTensorData ()
@property(readonly) MPSNDArray* array;
@end

@implementation MPSGraphTensorData {
  MPSNDArray* array_;
}
- (instancetype)initWithMPSNDArray:(MPSNDArray*)ndarray {
  array_ = ndarray;
  return self;
}
- (MPSNDArray*)array {
  return array_;
}
@end

@implementation MPSGraphExecutionDescriptor
@end

@interface MPSGraphConvolution2DOpDescriptor ()
@property(readonly) GraphNode parameters;
@end

@implementation MPSGraphConvolution2DOpDescriptor {
  GraphNode parameters_;
}
+ (instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
                              strideInY:(NSUInteger)strideInY
                        dilationRateInX:(NSUInteger)dilationRateInX
                        dilationRateInY:(NSUInteger)dilationRateInY
                                 groups:(NSUInteger)groups
                            paddingLeft:(NSUInteger)paddingLeft
                           paddingRight:(NSUInteger)paddingRight
                             paddingTop:(NSUInteger)paddingTop
                          paddingBottom:(NSUInteger)paddingBottom
                           paddingStyle:(MPSGraphPaddingStyle)paddingStyle
                             dataLayout:(MPSGraphTensorNamedDataLayout)dataLayout
                          weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout {
  if (paddingStyle != MPSGraphPaddingStyleExplicit || dataLayout != MPSGraphTensorNamedDataLayoutNCHW ||
      weightsLayout != MPSGraphTensorNamedDataLayoutOIHW) {
    violation("the fake convolution models explicit padding, NCHW data and OIHW weights only");
  }
  MPSGraphConvolution2DOpDescriptor* descriptor = [[MPSGraphConvolution2DOpDescriptor alloc] init];
  GraphNode& p = descriptor->parameters_;
  p.stride[0] = strideInX;
  p.stride[1] = strideInY;
  p.dilation[0] = dilationRateInX;
  p.dilation[1] = dilationRateInY;
  p.groups = groups;
  p.padding[0] = paddingLeft;
  p.padding[1] = paddingRight;
  p.padding[2] = paddingTop;
  p.padding[3] = paddingBottom;
  return descriptor;
}
- (GraphNode)parameters {
  return parameters_;
}
- (id)copyWithZone:(NSZone*)zone {
  (void)zone;
  return self;
}
@end

static MPSGraphTensor* graph_tensor(GraphNode node) {
  return [[MPSGraphTensor alloc] initWithNode:std::make_shared<GraphNode>(std::move(node))];
}

static std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> shape(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) violation("graph operands do not broadcast");
    shape[shape.size() - 1 - i] = x == 1 ? y : x;
  }
  return shape;
}

@implementation MPSGraph
- (instancetype)init {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_graphs_built;
  return self;
}
- (MPSGraphTensor*)placeholderWithShape:(MPSShape*)shape dataType:(MPSDataType)dataType name:(NSString*)name {
  (void)name;
  GraphNode node;
  node.shape = shape_of(shape);
  node.type = dataType;
  return graph_tensor(node);
}
- (MPSGraphTensor*)constantWithScalar:(double)scalar dataType:(MPSDataType)dataType {
  GraphNode node;
  node.kind = GraphNode::Kind::constant;
  node.type = dataType;
  node.scalar = scalar;
  return graph_tensor(node);
}
- (MPSGraphTensor*)matrixMultiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                         secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                                    name:(NSString*)name {
  (void)name;
  GraphNode node;
  node.kind = GraphNode::Kind::matmul;
  node.inputs = {primaryTensor.node, secondaryTensor.node};
  const std::vector<int64_t>& a = primaryTensor.node->shape;
  const std::vector<int64_t>& b = secondaryTensor.node->shape;
  if (a.size() != b.size() || a.size() < 2 || a[a.size() - 1] != b[b.size() - 2] ||
      !std::equal(a.begin(), a.end() - 2, b.begin()))
    violation("matrix multiplication of mismatched shapes");
  node.shape = a;
  node.shape.back() = b.back();
  node.type = primaryTensor.node->type;
  return graph_tensor(node);
}
- (MPSGraphTensor*)transposeTensor:(MPSGraphTensor*)tensor
                         dimension:(NSUInteger)dimensionIndex
                     withDimension:(NSUInteger)dimensionIndex2
                              name:(NSString*)name {
  (void)name;
  GraphNode node;
  node.kind = GraphNode::Kind::transpose;
  node.inputs = {tensor.node};
  node.shape = tensor.node->shape;
  std::swap(node.shape.at(dimensionIndex), node.shape.at(dimensionIndex2));
  node.dimensions[0] = dimensionIndex;
  node.dimensions[1] = dimensionIndex2;
  node.type = tensor.node->type;
  return graph_tensor(node);
}
- (MPSGraphTensor*)reshapeTensor:(MPSGraphTensor*)tensor withShape:(MPSShape*)shape name:(NSString*)name {
  (void)name;
  GraphNode node;
  node.kind = GraphNode::Kind::reshape;
  node.inputs = {tensor.node};
  node.shape = shape_of(shape);
  if (volume(node.shape) != volume(tensor.node->shape)) violation("reshape changes the element count");
  node.type = tensor.node->type;
  return graph_tensor(node);
}
- (MPSGraphTensor*)binary:(GraphNode::Kind)kind of:(MPSGraphTensor*)a and:(MPSGraphTensor*)b {
  GraphNode node;
  node.kind = kind;
  node.inputs = {a.node, b.node};
  node.shape = broadcast_shape(a.node->shape, b.node->shape);
  if (a.node->type != b.node->type) violation("binary operation on different data types");
  node.type = a.node->type;
  return graph_tensor(node);
}
- (MPSGraphTensor*)multiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                   secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                              name:(NSString*)name {
  (void)name;
  return [self binary:GraphNode::Kind::multiply of:primaryTensor and:secondaryTensor];
}
- (MPSGraphTensor*)additionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(NSString*)name {
  (void)name;
  return [self binary:GraphNode::Kind::add of:primaryTensor and:secondaryTensor];
}
- (MPSGraphTensor*)convolution2DWithSourceTensor:(MPSGraphTensor*)source
                                   weightsTensor:(MPSGraphTensor*)weights
                                      descriptor:(MPSGraphConvolution2DOpDescriptor*)descriptor
                                            name:(NSString*)name {
  (void)name;
  GraphNode node = descriptor.parameters;
  node.kind = GraphNode::Kind::convolution;
  node.inputs = {source.node, weights.node};
  const std::vector<int64_t>& x = source.node->shape;
  const std::vector<int64_t>& w = weights.node->shape;
  if (x.size() != 4 || w.size() != 4 || x[1] != w[1] * int64_t(node.groups)) {
    violation("convolution of mismatched shapes");
    return nil;
  }
  auto extent = [&](int64_t in, int64_t kernel, int axis) {
    const int64_t padded = in + int64_t(node.padding[2 * (1 - axis)]) + int64_t(node.padding[2 * (1 - axis) + 1]);
    return (padded - int64_t(node.dilation[1 - axis]) * (kernel - 1) - 1) / int64_t(node.stride[1 - axis]) + 1;
  };
  node.shape = {x[0], w[0], extent(x[2], w[2], 0), extent(x[3], w[3], 1)};
  node.type = source.node->type;
  return graph_tensor(node);
}
- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(MPSGraphTensorDataDictionary*)feeds
             targetOperations:(NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(MPSGraphTensorDataDictionary*)resultsDictionary
          executionDescriptor:(MPSGraphExecutionDescriptor*)executionDescriptor {
  (void)targetOperations;
  (void)executionDescriptor;
  struct Bound {
    const GraphNode* node;
    char* address;
    uint64_t serial;
    MPSDataType type;
    int64_t count;
  };
  auto bind = [](MPSGraphTensor* key, MPSGraphTensorData* data, Bound* bound) {
    MPSNDArray* array = data.array;
    const GraphNode& node = *key.node;
    if (array.descriptor.sizes != node.shape || array.descriptor.dataType != node.type)
      violation("graph tensor data does not match its tensor's shape or type");
    @autoreleasepool {
      bound->address = static_cast<char*>(array.buffer.contents) + array.offset;
    }
    bound->node = &node;
    bound->serial = array.buffer.serial;
    bound->type = node.type;
    bound->count = volume(node.shape);
  };
  std::vector<std::shared_ptr<GraphNode>> keep;
  Bound output{};
  if (resultsDictionary.count != 1) violation("the fake runs graphs with one result");
  std::vector<Bound> bound_feeds;
  FakeObjectDictionary* feed_dictionary = (FakeObjectDictionary*)feeds;
  FakeObjectDictionary* result_dictionary = (FakeObjectDictionary*)resultsDictionary;
  for (const auto& [key, value] : feed_dictionary.entries) {
    Bound bound{};
    bind(key, value, &bound);
    bound_feeds.push_back(bound);
    keep.push_back(((MPSGraphTensor*)key).node);
  }
  for (const auto& [key, value] : result_dictionary.entries) {
    bind(key, value, &output);
    keep.push_back(((MPSGraphTensor*)key).node);
  }
  log("graph");
  FakeCommandBuffer* target = (FakeCommandBuffer*)commandBuffer.commandBuffer;
  [target appendCommand:[bound_feeds, output, keep](std::string*) {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      for (const Bound& b : bound_feeds)
        if (!g_live_buffer_serials.count(b.serial)) g_violations.push_back("graph: buffer released before the GPU used it");
      if (!g_live_buffer_serials.count(output.serial)) {
        g_violations.push_back("graph: buffer released before the GPU used it");
        return;
      }
    }
    GraphValues values;
    for (const Bound& b : bound_feeds) {
      std::vector<double> data(static_cast<size_t>(b.count));
      for (int64_t i = 0; i < b.count; ++i) data[i] = load_element(b.address + i * element_bytes(b.type), b.type);
      values[b.node] = std::move(data);
    }
    const std::vector<double> result = evaluate(*output.node, values);
    for (int64_t i = 0; i < output.count; ++i)
      store_element(output.address + i * element_bytes(output.type), output.type, result[i]);
  }];
  if (const char* commits = std::getenv("FAKE_METAL_GRAPH_COMMITS"); commits && std::string(commits) == "1")
    [commandBuffer commitAndContinue];
}
@end
