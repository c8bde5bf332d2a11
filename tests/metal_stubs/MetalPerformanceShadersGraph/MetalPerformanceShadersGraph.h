// Stub of <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h> for the Linux
// type-check of native/device/metal/ (tests/test_metal_syntax.py). Not Apple's header: it
// declares only what the Metal device uses, with the signatures, enum values and
// availability Apple documents. "docs:" names the page under
// https://developer.apple.com/documentation/metalperformanceshadersgraph/.
#pragma once

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#pragma clang assume_nonnull begin

// docs: mpsshape
typedef NSArray<NSNumber*> MPSShape;

// docs: mpsgraphobject
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphObject : NSObject
@end

// docs: mpsgraphoperation
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphOperation : MPSGraphObject <NSCopying>
@end

// docs: mpsgraphtensor
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphTensor : MPSGraphObject <NSCopying>
@end

// docs: mpsgraphtensordata
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphTensorData : MPSGraphObject
// docs: mpsgraphtensordata (initWithMPSNDArray:)
- (instancetype)initWithMPSNDArray:(MPSNDArray*)ndarray;
@end

// docs: mpsgraphtensordatadictionary
typedef NSDictionary<MPSGraphTensor*, MPSGraphTensorData*> MPSGraphTensorDataDictionary;

// docs: mpsgraphexecutiondescriptor
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphExecutionDescriptor : MPSGraphObject
@end

// docs: mpsgraphtensornameddatalayout
typedef NS_ENUM(NSUInteger, MPSGraphTensorNamedDataLayout){
    MPSGraphTensorNamedDataLayoutNCHW = 0,
    MPSGraphTensorNamedDataLayoutNHWC = 1,
    MPSGraphTensorNamedDataLayoutOIHW = 2,
    MPSGraphTensorNamedDataLayoutHWIO = 3,
    MPSGraphTensorNamedDataLayoutCHW = 4,
    MPSGraphTensorNamedDataLayoutHWC = 5,
    MPSGraphTensorNamedDataLayoutHW = 6,
} API_AVAILABLE(macos(11.0), ios(14.0));

// docs: mpsgraphpaddingstyle
typedef NS_ENUM(NSUInteger, MPSGraphPaddingStyle){
    MPSGraphPaddingStyleExplicit = 0,
    MPSGraphPaddingStyleTF_VALID = 1,
    MPSGraphPaddingStyleTF_SAME = 2,
} API_AVAILABLE(macos(11.0), ios(14.0));

// docs: mpsgraphconvolution2dopdescriptor
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraphConvolution2DOpDescriptor : MPSGraphObject <NSCopying>
// docs: mpsgraphconvolution2dopdescriptor/init(strideinx:strideiny:dilationrateinx:dilationrateiny:groups:paddingleft:paddingright:paddingtop:paddingbottom:paddingstyle:datalayout:weightslayout:)
+ (nullable instancetype)descriptorWithStrideInX:(NSUInteger)strideInX
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
                                   weightsLayout:(MPSGraphTensorNamedDataLayout)weightsLayout;
@end

// docs: mpsgraph
API_AVAILABLE(macos(11.0), ios(14.0))
@interface MPSGraph : MPSGraphObject
// docs: mpsgraph/placeholder(shape:datatype:name:)
- (MPSGraphTensor*)placeholderWithShape:(nullable MPSShape*)shape
                               dataType:(MPSDataType)dataType
                                   name:(nullable NSString*)name;
// docs: mpsgraph (constantWithScalar:dataType:)
- (MPSGraphTensor*)constantWithScalar:(double)scalar dataType:(MPSDataType)dataType;
// docs: mpsgraph/matrixmultiplication(primary:secondary:name:)
- (MPSGraphTensor*)matrixMultiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                         secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                                    name:(nullable NSString*)name;
// docs: mpsgraph/transposetensor(_:dimension:withdimension:name:)
- (MPSGraphTensor*)transposeTensor:(MPSGraphTensor*)tensor
                         dimension:(NSUInteger)dimensionIndex
                     withDimension:(NSUInteger)dimensionIndex2
                              name:(nullable NSString*)name;
// docs: mpsgraph/reshape(_:shape:name:)
- (MPSGraphTensor*)reshapeTensor:(MPSGraphTensor*)tensor
                       withShape:(MPSShape*)shape
                            name:(nullable NSString*)name;
// docs: mpsgraph/multiplication(_:_:name:)
- (MPSGraphTensor*)multiplicationWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                                   secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                              name:(nullable NSString*)name;
// docs: mpsgraph/addition(_:_:name:)
- (MPSGraphTensor*)additionWithPrimaryTensor:(MPSGraphTensor*)primaryTensor
                             secondaryTensor:(MPSGraphTensor*)secondaryTensor
                                        name:(nullable NSString*)name;
// docs: mpsgraph/convolution2d(_:weights:descriptor:name:)
- (nullable MPSGraphTensor*)convolution2DWithSourceTensor:(MPSGraphTensor*)source
                                            weightsTensor:(MPSGraphTensor*)weights
                                               descriptor:(MPSGraphConvolution2DOpDescriptor*)descriptor
                                                     name:(nullable NSString*)name;
// docs: mpsgraph/encode(to:feeds:targetoperations:resultsdictionary:executiondescriptor:)
- (void)encodeToCommandBuffer:(MPSCommandBuffer*)commandBuffer
                        feeds:(MPSGraphTensorDataDictionary*)feeds
             targetOperations:(nullable NSArray<MPSGraphOperation*>*)targetOperations
            resultsDictionary:(MPSGraphTensorDataDictionary*)resultsDictionary
          executionDescriptor:(nullable MPSGraphExecutionDescriptor*)executionDescriptor
    API_AVAILABLE(macos(12.0), ios(15.0));
@end

#pragma clang assume_nonnull end
