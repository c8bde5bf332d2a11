// Parameters of the kernels in shaders/fft.metal (host side: native/ops/fft.cpp).
#pragma once

#include "params/common.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

// The transforms handle at most this many dimensions besides the transformed one.
ETM_PARAMS_CONSTANT uint32 kFftOuterDims = 8;

// Where the load and store kernels find each line (the elements along the transformed
// dimension) of the source and the destination. Lines are numbered over the other dimensions
// (last fastest); work buffers hold line after line, `length` elements each.
struct FftLines {
  int64 source_outer[kFftOuterDims];
  int64 destination_outer[kFftOuterDims];
  int64 source_stride;        // along the transformed dimension
  int64 destination_stride;
  uint32 outer_sizes[kFftOuterDims];
  uint32 outer_dims;
  uint32 length;              // n, the transform's length
  uint32 source_length;       // elements of a source line (fft_load_hermitian reads up to n / 2 + 1)
  float scale;                // applied by the stores
};
ETM_PARAMS_LAYOUT(FftLines, 192, scale, 188);

// One Stockham pass (fft_pass, fft_butterfly_2, fft_butterfly_4).
struct FftPass {
  uint32 length;  // n
  uint32 span;    // L: length of the sub-transforms already done
  uint32 radix;   // p
  float sign;     // -1 forward (exp(-2 pi i / n)), +1 inverse
};
ETM_PARAMS_LAYOUT(FftPass, 16, sign, 12);

// The pointwise steps of a chirp-z (Bluestein) transform of length n through circular
// convolutions of length m >= 2n - 1 (fft_chirp_*).
struct FftChirp {
  uint32 length;  // n
  uint32 padded;  // m, a power of two
  float sign;     // as FftPass's
  float scale;    // applied by fft_chirp_gather: 1 / m, undoing the unscaled inverse transform
};
ETM_PARAMS_LAYOUT(FftChirp, 16, scale, 12);

// fft_group_*: complex elements a threadgroup transforms in threadgroup memory (32 KiB).
ETM_PARAMS_CONSTANT uint32 kFftGroupElements = 4096;
// What fft_group's columns read and write (the kernels' Ends): work buffers (a Stockham stage),
// or whole lines from a real, complex or one-sided Hermitian source.
ETM_PARAMS_CONSTANT uint32 kFftEndsWork = 0;
ETM_PARAMS_CONSTANT uint32 kFftEndsReal = 1;
ETM_PARAMS_CONSTANT uint32 kFftEndsComplex = 2;
ETM_PARAMS_CONSTANT uint32 kFftEndsHermitian = 3;

// fft_group_*'s chirp-z steps (FftGroup::chirp, a set of these). Whole lines: the line is a
// chirp-z transform of n (lines' length) through a convolution of m = R. Stages of a chirp-z
// transform whose m passes kFftGroupElements: loads make the filter (conj(c_t)), spread lines of
// n (x_t c_t), or multiply by the filter's spectrum; stores gather the first n (c_k / m).
ETM_PARAMS_CONSTANT uint32 kFftChirpLine = 1;
ETM_PARAMS_CONSTANT uint32 kFftChirpMakeFilter = 2;
ETM_PARAMS_CONSTANT uint32 kFftChirpSpread = 4;
ETM_PARAMS_CONSTANT uint32 kFftChirpFilter = 8;
ETM_PARAMS_CONSTANT uint32 kFftChirpGather = 16;

// A dispatch of fft_group_*: `columns` transforms of `radix` per threadgroup, `column_count` in all.
struct FftGroup {
  uint32 length;         // stage: n, the work lines' length (m in a chirp-z transform's stages)
  uint32 span;           // stage: L, the sub-transforms' length before it
  uint32 radix;          // R, a power of two <= kFftGroupElements
  uint32 columns;
  uint32 column_count;   // stage: lines * n / R; whole lines: the number of lines
  uint32 output_length;  // whole lines: elements stored per line
  uint32 chirp;          // kFftChirp* steps
  uint32 chirp_length;   // stage with chirp steps: the transform's n (whole lines: FftLines's)
  float sign;            // of the (first) transform, as FftPass's; a chirp's filter and steps: the chirp's
  float chirp_scale;     // 1 / m, where a chirp-z transform's convolution ends
};
ETM_PARAMS_LAYOUT(FftGroup, 40, chirp_scale, 36);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
