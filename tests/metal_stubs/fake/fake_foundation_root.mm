// The root class and the constant-string class of the fake Foundation, for running
// native/device/metal/ on Linux with objc_runtime.cpp (the GNUstep 2.0 ABI); see
// fake_metal.mm. Compiled without ARC: a root class allocates and frees objects itself.
#import <Foundation/Foundation.h>

// From the Objective-C runtime (objc_runtime.cpp).
extern "C" id class_createInstance(Class cls, size_t extra_bytes);
extern "C" id object_dispose(id object);

// retain/release/autorelease are left to the runtime, which counts references itself.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wprotocol"
@implementation NSObject
+ (instancetype)alloc {
  return class_createInstance(self, 0);
}
+ (instancetype)new {
  return [[self alloc] init];
}
- (instancetype)init {
  return self;
}
- (void)dealloc {
  object_dispose(self);
}
- (BOOL)isEqual:(id)object {
  return self == object;
}
- (NSUInteger)hash {
  return (NSUInteger)self;
}
@end
#pragma clang diagnostic pop

// The layout clang emits for @"..." with the GNUstep 2 ABI.
@interface NSConstantString () {
  uint32_t flags_;
  uint32_t length_;
  uint32_t size_;
  uint32_t hash_;
  const char* data_;
}
@end

@implementation NSConstantString
- (const char*)UTF8String {
  return data_;
}
@end
