// The MSL sources in shaders/, compiled into libetmetal (native/embed_files.py).
#pragma once

#include "embedded_file.h"

namespace etm::ops {

extern const EmbeddedFile kShaderFiles[];
extern const size_t kShaderFiles_count;

}  // namespace etm::ops
