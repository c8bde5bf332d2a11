// Overloads on address spaces: MSL overloads functions on the address space of a parameter
// (`operator+=(device complex_t<T>& a, ...)`) or of `*this` (`complex_t() threadgroup`,
// `operator T() const device`). The CPU device has one address space, so such overloads of
// one signature would be redefinitions in C++.
#pragma once

#include <string>
#include <vector>

#include "device/cpu/msl_lexer.h"
#include "device/device.h"

namespace etm::device::cpu {

// In each namespace or class, of the functions whose declarations differ only in address
// spaces (`constant` counts as `const`, which C++ overloads on), the one that names none
// other than `thread` stays, else the first; the others are blanked (line breaks kept), and
// a `*this` qualifier is removed from those that stay. Function bodies are left alone. The
// output's tokens into *out_tokens when given (apply_edits).
Status rewrite_overload_sets(const std::string& source, const std::vector<Token>& tokens, std::string* out,
                             std::vector<Token>* out_tokens = nullptr);

}  // namespace etm::device::cpu
