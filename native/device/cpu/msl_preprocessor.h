// The translator's first stage: the part of the C preprocessor that decides what the
// translator sees. Conditional groups (#if/#ifdef/#ifndef/#elif/#else/#endif, `defined`)
// are evaluated against the macros Apple's compiler predefines plus the source's own
// #defines, in order; dead branches and the decided directives become blank lines. Then
// invocations of the source's macros that produce kernel syntax (ATen's and MLX's
// instantiation macros) are expanded in place. Line numbers never move.
//
// A condition that depends on what only the host compiler knows (__has_include, a reserved
// name such as __cpp_variable_templates, a macro from a header other than <metal_*>) stays
// in the output for the compiler, and every branch of it stays visible to the translator.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "device/cpu/msl_lexer.h"
#include "device/device.h"

namespace etm::device::cpu {

// The Metal language version the CPU device compiles (Apple's __METAL_VERSION__): 4.0, so
// that c10's IF_CONSTEXPR is `if constexpr`.
inline constexpr int kCpuMetalVersion = 400;

// The macros Apple's compiler predefines for `metal_version` on macOS (name, value). The
// feature macros follow the language version on every Apple GPU family: bfloat from 3.1.
// MSL 4's __HAVE_TENSOR__ is left out: the CPU device has no MetalPerformancePrimitives.
std::vector<std::pair<std::string, std::string>> predefined_metal_macros(int metal_version);

// The source with conditionals decided and kernel-producing macros expanded; `tokens` are
// the source's, *out_tokens (when given) the output's (apply_edits). Errors (an unbalanced
// group, a malformed #if, a live #error) name the line.
Status preprocess_msl(const std::string& source, const std::vector<Token>& tokens, int metal_version,
                      std::string* out, std::vector<Token>* out_tokens = nullptr);

}  // namespace etm::device::cpu
