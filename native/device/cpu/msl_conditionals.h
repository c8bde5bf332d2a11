// Conditional expressions with a bfloat operand. Metal's bfloat is a built-in arithmetic type,
// so `cond ? bf : 1.0f` takes the usual arithmetic conversions (float). The CPU device's bfloat
// is a class that converts to and from float, for which C++ finds conversions both ways and
// rejects the conditional as ambiguous.
#pragma once

#include <string>
#include <vector>

#include "device/cpu/msl_lexer.h"

namespace etm::device::cpu {

// In a source that names `bfloat`, each `c ? a : b` becomes
// `c ? static_cast<ARM(a, b)>(a) : static_cast<ARM(b, a)>(b)`, with ARM
// `::etm_msl::conditional_arm_t<void(type_tag<decltype((a))>, type_tag<decltype((b))>)>`
// (metal_include/etm_bfloat.h; the comma inside parentheses, as the cast may be a macro argument):
// the operand's own type and value category unless one operand is bfloat and the other
// another scalar, where it is Metal's common type. Only one arm is evaluated, as before.
// Left alone: conditionals inside attributes, arms holding a directive, a lambda or an
// attribute, third operands whose extent depends on whether a `<` opens a template argument
// list, and those whose arms would pass a size bound (deep nesting copies them). Line breaks
// stay where they were.
std::string rewrite_bfloat_conditionals(const std::string& source, const std::vector<Token>& tokens);

}  // namespace etm::device::cpu
