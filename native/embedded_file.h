// A file compiled into libetmetal (see embed_files.py): kernel headers of the CPU device,
// MSL sources of the ops in shaders/.
#pragma once

#include <cstddef>

namespace etm {

struct EmbeddedFile {
  const char* path;  // relative to the embedded folder, e.g. "matmul.metal"
  const char* contents;
  size_t size;
};

}  // namespace etm
