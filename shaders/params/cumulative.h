// Parameters of the kernels in shaders/cumulative.metal (host side: native/ops/cumulative.cpp).
#pragma once

#include "params/lines.h"

#ifndef __METAL_VERSION__
namespace etm::ops {
#endif

// Threads of a group of the *_line kernels (a threadgroup per line).
ETM_PARAMS_CONSTANT uint32 kCumulativeLineThreads = 256;

struct CumulativeParams {
  LineLayout layout;
  uint32 lines;
};
ETM_PARAMS_LAYOUT(CumulativeParams, 264, lines, 256);

#ifndef __METAL_VERSION__
}  // namespace etm::ops
#endif
