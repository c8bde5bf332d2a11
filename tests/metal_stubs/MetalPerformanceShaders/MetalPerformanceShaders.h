// Stub of <MetalPerformanceShaders/MetalPerformanceShaders.h> for the Linux type-check of
// native/device/metal/ (tests/test_metal_syntax.py). Not Apple's header: it declares only
// what the Metal device uses, with the signatures, enum values and availability Apple
// documents. "docs:" names the page under https://developer.apple.com/documentation/.
#pragma once

#import <Metal/Metal.h>

#pragma clang assume_nonnull begin

// docs: metalperformanceshaders/mpsdatatype
typedef NS_ENUM(uint32_t, MPSDataType){
    MPSDataTypeInvalid = 0,
    MPSDataTypeFloatBit = 0x10000000,
    MPSDataTypeFloat32 = MPSDataTypeFloatBit | 32,
    MPSDataTypeFloat16 = MPSDataTypeFloatBit | 16,
    MPSDataTypeAlternateEncodingBit = 0x80000000,
    MPSDataTypeBFloat16 API_AVAILABLE(macos(14.0), ios(17.0)) =
        MPSDataTypeAlternateEncodingBit | MPSDataTypeFloat16,
} API_AVAILABLE(macos(10.13), ios(11.0));

// docs: metalperformanceshaders/mpscommandbuffer
API_AVAILABLE(macos(10.15), ios(13.0))
@interface MPSCommandBuffer : NSObject <MTLCommandBuffer>
// docs: metalperformanceshaders/mpscommandbuffer/init(commandbuffer:) (commandBufferWithCommandBuffer:)
+ (instancetype)commandBufferWithCommandBuffer:(id<MTLCommandBuffer>)commandBuffer;
// docs: metalperformanceshaders/mpscommandbuffer/commandbuffer
@property(readonly, retain) id<MTLCommandBuffer> commandBuffer;
// docs: metalperformanceshaders/mpscommandbuffer/commitandcontinue()
- (void)commitAndContinue;
@end

// docs: metalperformanceshaders/mpsndarraydescriptor
API_AVAILABLE(macos(10.15), ios(13.0))
@interface MPSNDArrayDescriptor : NSObject
// docs: metalperformanceshaders/mpsndarraydescriptor/init(datatype:shape:)
+ (instancetype)descriptorWithDataType:(MPSDataType)dataType
                                 shape:(NSArray<NSNumber*>*)shape API_AVAILABLE(macos(11.0), ios(14.0));
#if ETM_STUB_SDK_VERSION >= 150000
// docs: metalperformanceshaders/mpsndarraydescriptor/preferpackedrows
@property(readwrite, nonatomic) BOOL preferPackedRows API_AVAILABLE(macos(15.0), ios(18.0));
#endif
@end

// docs: metalperformanceshaders/mpsndarray
API_AVAILABLE(macos(10.15), ios(13.0))
@interface MPSNDArray : NSObject
#if ETM_STUB_SDK_VERSION >= 150000
// docs: metalperformanceshaders/mpsndarray/init(buffer:offset:descriptor:)
- (instancetype)initWithBuffer:(id<MTLBuffer>)buffer
                        offset:(NSUInteger)offset
                    descriptor:(MPSNDArrayDescriptor*)descriptor API_AVAILABLE(macos(15.0), ios(18.0));
#endif
@end

#pragma clang assume_nonnull end
