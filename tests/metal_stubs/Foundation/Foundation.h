// Stub of <Foundation/Foundation.h> and the Objective-C runtime, for the Linux type-check of
// native/device/metal/ (tests/test_metal_syntax.py). Not Apple's header: it declares only
// what the Metal device uses, each with the signature Apple documents. "docs:" names the
// page under https://developer.apple.com/documentation/ (Swift spelling of the symbol).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "etm_stub_availability.h"

#pragma clang assume_nonnull begin

// docs: objectivec/objective-c_runtime (objc.h; arm64 BOOL is bool, x86_64 signed char)
#if defined(__arm64__) || defined(__aarch64__)
typedef bool BOOL;
#else
typedef signed char BOOL;
#endif
#define YES __objc_yes
#define NO __objc_no
#define nil nullptr

// docs: objectivec/nsuinteger, objectivec/nsinteger (LP64)
typedef unsigned long NSUInteger;
typedef long NSInteger;
// CoreFoundation/CFDate.h (imported by Foundation): docs: corefoundation/cftimeinterval
typedef double CFTimeInterval;

// As in the SDK for C++: an NS_ENUM is a typed enum, an NS_OPTIONS a plain integer type
// so that options combine with |.
#define NS_ENUM(type, name) \
  enum name : type name;    \
  enum name : type
#define NS_OPTIONS(type, name) \
  type name;                   \
  enum : type
#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))
#define NS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define NS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")

typedef struct _NSZone NSZone;

// docs: objectivec/nsobjectprotocol (manual reference counting is unavailable under ARC)
#if __has_feature(objc_arc)
#define NS_AUTOMATED_REFCOUNT_UNAVAILABLE \
  __attribute__((unavailable("not available in automatic reference counting mode")))
#else
#define NS_AUTOMATED_REFCOUNT_UNAVAILABLE
#endif
@protocol NSObject
- (BOOL)isEqual:(nullable id)object;
@property(readonly) NSUInteger hash;
- (instancetype)retain NS_AUTOMATED_REFCOUNT_UNAVAILABLE;
- (oneway void)release NS_AUTOMATED_REFCOUNT_UNAVAILABLE;
- (instancetype)autorelease NS_AUTOMATED_REFCOUNT_UNAVAILABLE;
@end

// docs: objectivec/nsobject
__attribute__((objc_root_class))
@interface NSObject <NSObject> {
  Class isa;
}
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
@end

// docs: foundation/nscopying
@protocol NSCopying
- (id)copyWithZone:(nullable NSZone*)zone;
@end

// docs: foundation/nsfastenumeration (what for ... in needs)
typedef struct {
  unsigned long state;
  id __unsafe_unretained _Nullable* _Nullable itemsPtr;
  unsigned long* _Nullable mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;

@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState*)state
                                  objects:(id __unsafe_unretained _Nullable[_Nonnull])buffer
                                    count:(NSUInteger)len;
@end

// docs: foundation/nsrange, foundation/nsmakerange(_:_:)
typedef struct _NSRange {
  NSUInteger location;
  NSUInteger length;
} NSRange;

static inline NSRange NSMakeRange(NSUInteger location, NSUInteger length) {
  NSRange range;
  range.location = location;
  range.length = length;
  return range;
}

// docs: foundation/nsstring
typedef NSUInteger NSStringEncoding;
// docs: foundation/nsutf8stringencoding
static const NSStringEncoding NSUTF8StringEncoding = 4;

@interface NSString : NSObject <NSCopying>
// docs: foundation/nsstring/init(bytes:length:encoding:)
- (nullable instancetype)initWithBytes:(const void*)bytes
                                length:(NSUInteger)len
                              encoding:(NSStringEncoding)encoding;
// docs: foundation/nsstring/utf8string
@property(nullable, readonly) const char* UTF8String NS_RETURNS_INNER_POINTER;
// docs: foundation/nsstring/isequal(to:)
- (BOOL)isEqualToString:(NSString*)aString;
@end

// The class of @"..." literals.
@interface NSConstantString : NSString
@end

// docs: foundation/nsvalue
@interface NSValue : NSObject <NSCopying>
@end

// docs: foundation/nsnumber
@interface NSNumber : NSValue
// docs: foundation/nsnumber/init(value:) (numberWithLongLong:)
+ (NSNumber*)numberWithLongLong:(long long)value;
// docs: foundation/nsnumber/int64value
@property(readonly) long long longLongValue;
@end

// docs: foundation/nsarray
@interface NSArray<__covariant ObjectType> : NSObject <NSCopying, NSFastEnumeration>
// docs: foundation/nsarray/init(objects:count:) (arrayWithObjects:count:)
+ (instancetype)arrayWithObjects:(const ObjectType _Nonnull[_Nonnull])objects count:(NSUInteger)cnt;
@property(readonly) NSUInteger count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
@end

// docs: foundation/nsdictionary
@interface NSDictionary<__covariant KeyType, __covariant ObjectType> : NSObject <NSCopying>
// docs: foundation/nsdictionary/init(objects:forkeys:count:) (dictionaryWithObjects:forKeys:count:)
+ (instancetype)dictionaryWithObjects:(const ObjectType _Nonnull[_Nullable])objects
                              forKeys:(const KeyType<NSCopying> _Nonnull[_Nullable])keys
                                count:(NSUInteger)cnt;
@property(readonly) NSUInteger count;
- (nullable ObjectType)objectForKey:(KeyType)aKey;
// docs: foundation/nsdictionary/allvalues
@property(readonly, copy) NSArray<ObjectType>* allValues;
@end

// docs: foundation/nserror
typedef NSString* NSErrorDomain;
typedef NSString* NSErrorUserInfoKey;

@interface NSError : NSObject <NSCopying>
@property(readonly, copy) NSErrorDomain domain;
@property(readonly) NSInteger code;
@property(readonly, copy) NSDictionary<NSErrorUserInfoKey, id>* userInfo;
// docs: foundation/nserror/localizeddescription
@property(readonly, copy) NSString* localizedDescription;
@end

// docs: foundation/nsurl
@interface NSURL : NSObject <NSCopying>
// docs: foundation/nsurl/init(fileurlwithpath:)
+ (NSURL*)fileURLWithPath:(NSString*)path;
@end

#pragma clang assume_nonnull end
