// The headers translated kernels include (metal_include/ and kernel_support/), embedded in
// libetmetal at build time by native/embed_files.py so that an installed library needs no
// source tree; the compiler driver writes them into the cache directory at first use. Paths
// are relative: "metal_include/metal_stdlib", "kernel_support/etm_cpu_kernel.h".
#pragma once

#include "embedded_file.h"

namespace etm::device::cpu {

using etm::EmbeddedFile;

extern const EmbeddedFile kEmbeddedKernelHeaders[];
extern const size_t kEmbeddedKernelHeaders_count;

// The translator's sources (msl_*.cpp/h), for msl_translator_identity().
extern const EmbeddedFile kEmbeddedTranslatorSources[];
extern const size_t kEmbeddedTranslatorSources_count;

}  // namespace etm::device::cpu
