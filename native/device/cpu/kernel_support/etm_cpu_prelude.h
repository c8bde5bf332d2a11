// What every translated kernel includes, as one header: the compiler driver precompiles it
// (g++), which takes most of the work off a small kernel's compile. Nothing here may name a
// macro that the driver defines per compile (the kernel selection, function constant values):
// g++ rejects a precompiled header that mentions a macro defined differently at its use.
#pragma once

#include "etm_cpu_kernel.h"
#include <metal_stdlib>
#include "etm_cpu_kernel_wrapper.h"
