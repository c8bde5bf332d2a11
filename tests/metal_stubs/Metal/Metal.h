// Stub of <Metal/Metal.h> for the Linux type-check of native/device/metal/
// (tests/test_metal_syntax.py). Not Apple's header: it declares only what the Metal device
// uses, each with the Objective-C signature, nullability, enum values and availability that
// Apple documents, so that a misspelled selector, a wrong argument type or an unguarded
// newer API fails the check. "docs:" names the page under
// https://developer.apple.com/documentation/ (Swift spelling of the symbol).
#pragma once

#import <Foundation/Foundation.h>

#pragma clang assume_nonnull begin

@protocol MTLDevice;
@protocol MTLCommandQueue;
@protocol MTLFunction;

// --- MTLTypes.h -----------------------------------------------------------------------

// docs: metal/mtlsize, metal/mtlsizemake(_:_:_:)
typedef struct {
  NSUInteger width;
  NSUInteger height;
  NSUInteger depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize size = {width, height, depth};
  return size;
}

// --- MTLResource.h, MTLAllocation.h, MTLBuffer.h -----------------------------------------

// docs: metal/mtlresourceoptions
typedef NS_OPTIONS(NSUInteger, MTLResourceOptions){
    MTLResourceCPUCacheModeDefaultCache = 0,
    MTLResourceCPUCacheModeWriteCombined = 1,
    MTLResourceStorageModeShared = 0 << 4,
    MTLResourceStorageModeManaged = 1 << 4,
    MTLResourceStorageModePrivate = 2 << 4,
    MTLResourceHazardTrackingModeDefault = 0 << 8,
    MTLResourceHazardTrackingModeUntracked = 1 << 8,
    MTLResourceHazardTrackingModeTracked = 2 << 8,
};

#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtlallocation
API_AVAILABLE(macos(15.0), ios(18.0))
@protocol MTLAllocation <NSObject>
@property(readonly) NSUInteger allocatedSize;
@end

// docs: metal/mtlresource
@protocol MTLResource <MTLAllocation>
@property(readonly) id<MTLDevice> device;
@end
#else
@protocol MTLResource <NSObject>
@property(readonly) id<MTLDevice> device;
@end
#endif

// docs: metal/mtlbuffer
@protocol MTLBuffer <MTLResource>
// docs: metal/mtlbuffer/length
@property(readonly) NSUInteger length;
// docs: metal/mtlbuffer/contents()
- (void*)contents NS_RETURNS_INNER_POINTER;
@end

// --- MTLLibrary.h --------------------------------------------------------------------

// docs: metal/mtlfunctiontype
typedef NS_ENUM(NSUInteger, MTLFunctionType){
    MTLFunctionTypeVertex = 1,
    MTLFunctionTypeFragment = 2,
    MTLFunctionTypeKernel = 3,
};

// docs: metal/mtldatatype (the scalar cases the Metal device uses)
typedef NS_ENUM(NSUInteger, MTLDataType){
    MTLDataTypeFloat = 3,
    MTLDataTypeHalf = 16,
    MTLDataTypeInt = 29,
    MTLDataTypeUInt = 33,
    MTLDataTypeShort = 37,
    MTLDataTypeUShort = 41,
    MTLDataTypeChar = 45,
    MTLDataTypeUChar = 49,
    MTLDataTypeBool = 53,
    MTLDataTypeLong API_AVAILABLE(macos(10.14)) = 81,
    MTLDataTypeULong API_AVAILABLE(macos(10.14)) = 85,
    MTLDataTypeBFloat API_AVAILABLE(macos(14.0)) = 121,
};

// docs: metal/mtlfunctionconstant
@interface MTLFunctionConstant : NSObject
@property(readonly) NSString* name;
@property(readonly) MTLDataType type;
@property(readonly) NSUInteger index;
@property(readonly) BOOL required;
@end

// docs: metal/mtlfunctionconstantvalues
@interface MTLFunctionConstantValues : NSObject <NSCopying>
// docs: metal/mtlfunctionconstantvalues/setconstantvalue(_:type:index:)
- (void)setConstantValue:(const void*)value type:(MTLDataType)type atIndex:(NSUInteger)index;
// docs: metal/mtlfunctionconstantvalues/setconstantvalue(_:type:withname:)
- (void)setConstantValue:(const void*)value type:(MTLDataType)type withName:(NSString*)name;
@end

// docs: metal/mtlfunction
@protocol MTLFunction <NSObject>
// docs: metal/mtlfunction/functiontype
@property(readonly) MTLFunctionType functionType;
@property(readonly) NSString* name;
// docs: metal/mtlfunction/functionconstantsdictionary
@property(readonly) NSDictionary<NSString*, MTLFunctionConstant*>* functionConstantsDictionary;
@end

// docs: metal/mtllibrary
@protocol MTLLibrary <NSObject>
// docs: metal/mtllibrary/makefunction(name:)
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)functionName;
// docs: metal/mtllibrary/makefunction(name:constantvalues:)
- (nullable id<MTLFunction>)newFunctionWithName:(NSString*)name
                                 constantValues:(MTLFunctionConstantValues*)constantValues
                                          error:(NSError* _Nullable* _Nullable)error;
// docs: metal/mtllibrary/functionnames
@property(readonly) NSArray<NSString*>* functionNames;
@end

// docs: metal/mtllanguageversion ((major << 16) + minor)
typedef NS_ENUM(NSUInteger, MTLLanguageVersion){
    MTLLanguageVersion2_4 API_AVAILABLE(macos(12.0)) = (2 << 16) + 4,
    MTLLanguageVersion3_0 API_AVAILABLE(macos(13.0)) = (3 << 16) + 0,
    MTLLanguageVersion3_1 API_AVAILABLE(macos(14.0)) = (3 << 16) + 1,
#if ETM_STUB_SDK_VERSION >= 150000
    MTLLanguageVersion3_2 API_AVAILABLE(macos(15.0)) = (3 << 16) + 2,
#endif
#if ETM_STUB_SDK_VERSION >= 260000
    MTLLanguageVersion4_0 API_AVAILABLE(macos(26.0)) = (4 << 16) + 0,
#endif
};

#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtlmathmode
typedef NS_ENUM(NSInteger, MTLMathMode){
    MTLMathModeSafe = 0,
    MTLMathModeRelaxed = 1,
    MTLMathModeFast = 2,
} API_AVAILABLE(macos(15.0), ios(18.0));

// docs: metal/mtlmathfloatingpointfunctions
typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions){
    MTLMathFloatingPointFunctionsFast = 0,
    MTLMathFloatingPointFunctionsPrecise = 1,
} API_AVAILABLE(macos(15.0), ios(18.0));
#endif

// docs: metal/mtlcompileoptions
@interface MTLCompileOptions : NSObject <NSCopying>
#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtlcompileoptions/fastmathenabled
@property(readwrite, nonatomic) BOOL fastMathEnabled
    API_DEPRECATED("Use mathMode instead", macos(10.11, 15.0), ios(8.0, 18.0));
// docs: metal/mtlcompileoptions/mathmode
@property(readwrite, nonatomic) MTLMathMode mathMode API_AVAILABLE(macos(15.0), ios(18.0));
// docs: metal/mtlcompileoptions/mathfloatingpointfunctions
@property(readwrite, nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions
    API_AVAILABLE(macos(15.0), ios(18.0));
#else
@property(readwrite, nonatomic) BOOL fastMathEnabled;
#endif
// docs: metal/mtlcompileoptions/languageversion
@property(readwrite, nonatomic) MTLLanguageVersion languageVersion;
@end

// --- MTLComputePipeline.h ------------------------------------------------------------

// docs: metal/mtlcomputepipelinestate
@protocol MTLComputePipelineState <NSObject>
// docs: metal/mtlcomputepipelinestate/maxtotalthreadsperthreadgroup
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
// docs: metal/mtlcomputepipelinestate/threadexecutionwidth
@property(readonly) NSUInteger threadExecutionWidth;
// docs: metal/mtlcomputepipelinestate/staticthreadgroupmemorylength
@property(readonly) NSUInteger staticThreadgroupMemoryLength API_AVAILABLE(macos(10.13), ios(11.0));
@end

// --- MTLCommandEncoder.h, MTLComputeCommandEncoder.h, MTLBlitCommandEncoder.h ----------

// docs: metal/mtlcommandencoder
@protocol MTLCommandEncoder <NSObject>
// docs: metal/mtlcommandencoder/endencoding()
- (void)endEncoding;
@end

// docs: metal/mtlbarrierscope
typedef NS_OPTIONS(NSUInteger, MTLBarrierScope){
    MTLBarrierScopeBuffers = 1 << 0,
    MTLBarrierScopeTextures = 1 << 1,
} API_AVAILABLE(macos(10.14), ios(12.0));

// docs: metal/mtlcomputecommandencoder
@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
// docs: metal/mtlcomputecommandencoder/setcomputepipelinestate(_:)
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
// docs: metal/mtlcomputecommandencoder/setbuffer(_:offset:index:)
- (void)setBuffer:(nullable id<MTLBuffer>)buffer
           offset:(NSUInteger)offset
          atIndex:(NSUInteger)index;
// docs: metal/mtlcomputecommandencoder/setbytes(_:length:index:)
- (void)setBytes:(const void*)bytes
          length:(NSUInteger)length
         atIndex:(NSUInteger)index API_AVAILABLE(macos(10.11), ios(8.3));
// docs: metal/mtlcomputecommandencoder/setthreadgroupmemorylength(_:index:)
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
// docs: metal/mtlcomputecommandencoder/dispatchthreadgroups(_:threadsperthreadgroup:)
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
// docs: metal/mtlcomputecommandencoder/dispatchthreads(_:threadsperthreadgroup:)
- (void)dispatchThreads:(MTLSize)threadsPerGrid
    threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup API_AVAILABLE(macos(10.13), ios(11.0));
// docs: metal/mtlcomputecommandencoder/memorybarrier(scope:)
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope API_AVAILABLE(macos(10.14), ios(12.0));
@end

// docs: metal/mtlblitcommandencoder
@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
// docs: metal/mtlblitcommandencoder/copy(from:sourceoffset:to:destinationoffset:size:)
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
// docs: metal/mtlblitcommandencoder/fill(buffer:range:value:)
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
@end

// --- MTLCommandBuffer.h --------------------------------------------------------------

// docs: metal/mtlcommandbufferstatus
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus){
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
} API_AVAILABLE(macos(10.11), ios(8.0));

// docs: metal/mtlcommandbuffererrordomain
extern "C" NSErrorDomain const MTLCommandBufferErrorDomain API_AVAILABLE(macos(10.11), ios(8.0));

// docs: metal/mtlcommandbuffererror/code
typedef NS_ENUM(NSUInteger, MTLCommandBufferError){
    MTLCommandBufferErrorNone = 0,
    MTLCommandBufferErrorInternal = 1,
    MTLCommandBufferErrorTimeout = 2,
    MTLCommandBufferErrorPageFault = 3,
    MTLCommandBufferErrorBlacklisted API_DEPRECATED("Use MTLCommandBufferErrorAccessRevoked",
                                                    macos(10.11, 13.0)) = 4,
    MTLCommandBufferErrorAccessRevoked = 4,
    MTLCommandBufferErrorNotPermitted = 7,
    MTLCommandBufferErrorOutOfMemory = 8,
    MTLCommandBufferErrorInvalidResource = 9,
    MTLCommandBufferErrorMemoryless API_AVAILABLE(macos(11.0), ios(10.0)) = 10,
    MTLCommandBufferErrorDeviceRemoved API_AVAILABLE(macos(10.13)) = 11,
    MTLCommandBufferErrorStackOverflow API_AVAILABLE(macos(12.0), ios(15.0)) = 12,
} API_AVAILABLE(macos(10.11), ios(8.0));

// docs: metal/mtldispatchtype
typedef NS_ENUM(NSUInteger, MTLDispatchType){
    MTLDispatchTypeSerial,
    MTLDispatchTypeConcurrent,
} API_AVAILABLE(macos(10.14), ios(12.0));

@protocol MTLCommandBuffer;
// docs: metal/mtlcommandbufferhandler
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);

// docs: metal/mtlcommandbuffer
@protocol MTLCommandBuffer <NSObject>
// docs: metal/mtlcommandbuffer/commit()
- (void)commit;
// docs: metal/mtlcommandbuffer/addcompletedhandler(_:)
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
// docs: metal/mtlcommandbuffer/waituntilcompleted()
- (void)waitUntilCompleted;
// docs: metal/mtlcommandbuffer/status
@property(readonly) MTLCommandBufferStatus status;
// docs: metal/mtlcommandbuffer/error
@property(nullable, readonly) NSError* error;
// docs: metal/mtlcommandbuffer/gpustarttime
@property(readonly) CFTimeInterval GPUStartTime API_AVAILABLE(macos(10.15), ios(10.3));
// docs: metal/mtlcommandbuffer/gpuendtime
@property(readonly) CFTimeInterval GPUEndTime API_AVAILABLE(macos(10.15), ios(10.3));
// docs: metal/mtlcommandbuffer/makeblitcommandencoder()
- (nullable id<MTLBlitCommandEncoder>)blitCommandEncoder;
// docs: metal/mtlcommandbuffer/makecomputecommandencoder(dispatchtype:)
- (nullable id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:
    (MTLDispatchType)dispatchType API_AVAILABLE(macos(10.14), ios(12.0));
@end

// --- MTLResidencySet.h ---------------------------------------------------------------

#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtlresidencysetdescriptor
API_AVAILABLE(macos(15.0), ios(18.0))
@interface MTLResidencySetDescriptor : NSObject <NSCopying>
@property(copy, nullable, atomic) NSString* label;
@property(atomic) NSUInteger initialCapacity;
@end

// docs: metal/mtlresidencyset
API_AVAILABLE(macos(15.0), ios(18.0))
@protocol MTLResidencySet <NSObject>
// docs: metal/mtlresidencyset/addallocation(_:)
- (void)addAllocation:(id<MTLAllocation>)allocation;
// docs: metal/mtlresidencyset/removeallocation(_:)
- (void)removeAllocation:(id<MTLAllocation>)allocation;
// docs: metal/mtlresidencyset/commit()
- (void)commit;
// docs: metal/mtlresidencyset/requestresidency()
- (void)requestResidency;
// docs: metal/mtlresidencyset/allocatedsize
@property(readonly) uint64_t allocatedSize;
@end
#endif

// --- MTLCommandQueue.h ---------------------------------------------------------------

// docs: metal/mtlcommandqueue
@protocol MTLCommandQueue <NSObject>
// docs: metal/mtlcommandqueue/makecommandbufferwithunretainedreferences()
- (nullable id<MTLCommandBuffer>)commandBufferWithUnretainedReferences;
#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtlcommandqueue/addresidencyset(_:)
- (void)addResidencySet:(id<MTLResidencySet>)residencySet API_AVAILABLE(macos(15.0), ios(18.0));
#endif
@end

// --- MTLDevice.h ---------------------------------------------------------------------

// docs: metal/mtlarchitecture
API_AVAILABLE(macos(14.0), ios(17.0))
@interface MTLArchitecture : NSObject <NSCopying>
// docs: metal/mtlarchitecture/name
@property(nonnull, readonly) NSString* name;
@end

// docs: metal/mtldevice
@protocol MTLDevice <NSObject>
// docs: metal/mtldevice/name
@property(nonnull, readonly) NSString* name;
// docs: metal/mtldevice/architecture
@property(nonnull, readonly) MTLArchitecture* architecture API_AVAILABLE(macos(14.0), ios(17.0));
// docs: metal/mtldevice/recommendedmaxworkingsetsize
@property(readonly) uint64_t recommendedMaxWorkingSetSize API_AVAILABLE(macos(10.12), ios(16.0));
// docs: metal/mtldevice/maxbufferlength
@property(readonly) NSUInteger maxBufferLength API_AVAILABLE(macos(10.14), ios(12.0));
// docs: metal/mtldevice/maxthreadgroupmemorylength
@property(readonly) NSUInteger maxThreadgroupMemoryLength API_AVAILABLE(macos(10.13), ios(11.0));
// docs: metal/mtldevice/makecommandqueue()
- (nullable id<MTLCommandQueue>)newCommandQueue;
// docs: metal/mtldevice/makebuffer(length:options:)
- (nullable id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                                      options:(MTLResourceOptions)options;
// docs: metal/mtldevice/makebuffer(bytesnocopy:length:options:deallocator:)
- (nullable id<MTLBuffer>)newBufferWithBytesNoCopy:(void*)pointer
                                            length:(NSUInteger)length
                                           options:(MTLResourceOptions)options
                                       deallocator:(void (^_Nullable)(void* pointer,
                                                                      NSUInteger length))
                                                       deallocator;
// docs: metal/mtldevice/makelibrary(source:options:)
- (nullable id<MTLLibrary>)newLibraryWithSource:(NSString*)source
                                        options:(nullable MTLCompileOptions*)options
                                          error:(__autoreleasing NSError* _Nullable* _Nullable)error;
// docs: metal/mtldevice/makecomputepipelinestate(function:)
- (nullable id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(id<MTLFunction>)computeFunction
                                  error:(__autoreleasing NSError* _Nullable* _Nullable)error;
#if ETM_STUB_SDK_VERSION >= 150000
// docs: metal/mtldevice/makeresidencyset(descriptor:)
- (nullable id<MTLResidencySet>)
    newResidencySetWithDescriptor:(MTLResidencySetDescriptor*)desc
                            error:(__autoreleasing NSError* _Nullable* _Nullable)error
    API_AVAILABLE(macos(15.0), ios(18.0));
#endif
@end

// docs: metal/mtlcreatesystemdefaultdevice()
extern "C" id<MTLDevice> _Nullable MTLCreateSystemDefaultDevice(void)
    API_AVAILABLE(macos(10.11), ios(8.0)) NS_RETURNS_RETAINED;

// docs: metal/mtlcopyalldevices()
extern "C" NSArray<id<MTLDevice>>* MTLCopyAllDevices(void) API_AVAILABLE(macos(10.11))
    NS_RETURNS_RETAINED;

// --- MTLCaptureManager.h -------------------------------------------------------------

// docs: metal/mtlcapturedestination
typedef NS_ENUM(NSInteger, MTLCaptureDestination){
    MTLCaptureDestinationDeveloperTools = 1,
    MTLCaptureDestinationGPUTraceDocument = 2,
} API_AVAILABLE(macos(10.15), ios(13.0));

// docs: metal/mtlcapturedescriptor
API_AVAILABLE(macos(10.15), ios(13.0))
@interface MTLCaptureDescriptor : NSObject <NSCopying>
// docs: metal/mtlcapturedescriptor/captureobject
@property(nonatomic, strong, nullable) id captureObject;
// docs: metal/mtlcapturedescriptor/destination
@property(nonatomic, assign) MTLCaptureDestination destination;
// docs: metal/mtlcapturedescriptor/outputurl
@property(nonatomic, copy, nullable) NSURL* outputURL;
@end

// docs: metal/mtlcapturemanager
API_AVAILABLE(macos(10.13), ios(11.0))
@interface MTLCaptureManager : NSObject
// docs: metal/mtlcapturemanager/shared()
+ (MTLCaptureManager*)sharedCaptureManager;
// docs: metal/mtlcapturemanager/supportsdestination(_:)
- (BOOL)supportsDestination:(MTLCaptureDestination)destination
    API_AVAILABLE(macos(10.15), ios(13.0));
// docs: metal/mtlcapturemanager/startcapture(with:)
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor*)descriptor
                             error:(__autoreleasing NSError* _Nullable* _Nullable)error
    API_AVAILABLE(macos(10.15), ios(13.0));
// docs: metal/mtlcapturemanager/stopcapture()
- (void)stopCapture;
// docs: metal/mtlcapturemanager/iscapturing
@property(readonly) BOOL isCapturing;
@end

#pragma clang assume_nonnull end
