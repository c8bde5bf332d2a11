// The headers translated kernels include (metal_include/ and kernel_support/), embedded in
// libetmetal at build time by embed_kernel_headers.py so that an installed library needs no
// source tree; the compiler driver writes them into the cache directory at first use.
#pragma once

#include <cstddef>

namespace etm::device::cpu {

struct EmbeddedFile {
  const char* path;  // relative: "metal_include/metal_stdlib", "kernel_support/etm_cpu_kernel.h"
  const char* contents;
  size_t size;
};

extern const EmbeddedFile kEmbeddedKernelHeaders[];
extern const size_t kEmbeddedKernelHeaderCount;

}  // namespace etm::device::cpu
