#include "device/cpu/dispatch_overlap.h"

#include <vector>

#include "device/cpu/msl_lexer.h"
#include "device/settings.h"

namespace etm::device::cpu {

bool overlap_enabled() {
  static const bool enabled = [] {
    std::string value;  // the runtime reports an invalid value when it starts
    return !settings::read_choice("ETMETAL_CPU_OVERLAP", &value).ok() || value != "0";
  }();
  return enabled;
}

bool may_follow_stored_addresses(const std::string& msl) {
  std::vector<Token> tokens;
  std::string error;
  if (!lex_msl(msl, &tokens, &error)) return true;
  const auto is = [&](size_t i, const char* word) {
    return i < tokens.size() && msl.compare(tokens[i].begin, tokens[i].end - tokens[i].begin, word) == 0;
  };
  const auto address_space = [&](size_t i) { return is(i, "device") || is(i, "constant"); };
  const auto qualifier = [&](size_t i) {
    return address_space(i) || is(i, "const") || is(i, "volatile") || is(i, "thread") || is(i, "threadgroup") ||
           is(i, "restrict") || is(i, "__restrict");
  };
  const std::vector<size_t> pairs = pair_brackets(msl, tokens);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (is(i, "struct") || is(i, "class") || is(i, "union")) {
      size_t j = i + 1;
      while (j < tokens.size() && !is(j, "{") && !is(j, ";") && !is(j, "(") && !is(j, ")")) ++j;
      if (is(j, "{") && pairs[j] != SIZE_MAX) {
        // A pointer or reference declared with an address space (a `static constant` value is none).
        for (size_t k = j + 1; k < pairs[j]; ++k) {
          if (!address_space(k)) continue;
          for (size_t m = k + 1; m < pairs[j] && !is(m, ";") && !is(m, "{") && !is(m, ",") && !is(m, ")"); ++m)
            if (is(m, "*") || is(m, "&")) return true;
        }
      }
    }
    if (is(i, "*")) {
      size_t j = i + 1;
      while (qualifier(j)) ++j;
      if (is(j, "*")) return true;
    }
    // A cast or a template argument naming a device or constant pointer: `(device T*)`,
    // `reinterpret_cast<device T*>`, `f<constant T*>`.
    if (is(i, "(") && pairs[i] != SIZE_MAX && pairs[i] > i + 1 && is(pairs[i] - 1, "*")) {
      bool cast = false, plain = true;
      for (size_t k = i + 1; k + 1 < pairs[i] && plain; ++k) {
        cast = cast || address_space(k);
        plain = tokens[k].kind == TokenKind::identifier || is(k, "*") || is(k, "::") || is(k, "<") || is(k, ">");
      }
      if (cast && plain) return true;
    }
    // A `<` that a `>` closes before any `;`, `{`, `(` or `)` (a comparison otherwise).
    if (is(i, "<")) {
      size_t j = i + 1;
      bool names_address_space = false, pointer = false;
      for (; j < tokens.size() && !is(j, ">") && !is(j, ";") && !is(j, "{") && !is(j, "(") && !is(j, ")"); ++j) {
        names_address_space = names_address_space || address_space(j);
        pointer = pointer || is(j, "*");
      }
      if (is(j, ">") && names_address_space && pointer) return true;
    }
  }
  return false;
}

}  // namespace etm::device::cpu
