// Function constants for the CPU device: a translation stage and the specialisation flags.
//
// `constant T name [[function_constant(n)]];` at program scope becomes
// `constexpr T name = static_cast<T>(ETM_FC_VALUE_n);` and `is_function_constant_defined(name)`
// becomes `(ETM_FC_PRESENT_n != 0)`. Each pipeline's object is compiled with its values as
// -D flags (part of the object's cache key), so every specialisation is a distinct object,
// as Metal compiles one per MTLFunctionConstantValues. Without a value a constant is
// undefined: it reads as zero and is_function_constant_defined is false.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cpu/msl_lexer.h"
#include "device/device.h"

namespace etm::device::cpu {

struct FunctionConstant {
  std::string name;
  uint32_t index = 0;
  std::string type;  // the declared scalar type, e.g. "bool", "uint", "half"
};

// Rewrites the declarations and queries in `source` (whose tokens are `tokens`); the output's
// tokens into *out_tokens when given (apply_edits).
Status rewrite_function_constants(const std::string& source, const std::vector<Token>& tokens,
                                  std::string* out, std::vector<FunctionConstant>* constants,
                                  std::vector<Token>* out_tokens = nullptr);

// Defaults for every declared constant (undefined), to precede the translated source.
std::string function_constant_defaults(const std::vector<FunctionConstant>& constants);

// The compiler flags that give `values` to the declared constants; empty for none.
Status function_constant_flags(const std::vector<FunctionConstant>& declared,
                               const std::vector<FunctionConstantValue>& values,
                               std::vector<std::string>* flags);

}  // namespace etm::device::cpu
