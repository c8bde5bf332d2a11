#include "device/cpu/msl_conditionals.h"

#include <cstring>

namespace etm::device::cpu {
namespace {

// Arms whose rewritten text passes this are left as they are: each rewrite copies both arms
// twice more (into decltype), so nested conditionals grow threefold per level.
constexpr size_t kMaxArmsBytes = 4096;

class ConditionalRewriter {
 public:
  ConditionalRewriter(const std::string& text, const std::vector<Token>& tokens) : text_(text), tokens_(tokens) {}

  // Tokens [first, last) with the source between them, conditionals rewritten.
  std::string render(size_t first, size_t last) const {
    std::string out;
    if (first >= last) return out;
    size_t copied = tokens_[first].begin;
    for (size_t k = first; k < last; ++k) {
      if (is(k, "[") && k + 1 < last && is(k + 1, "[")) {
        k = attribute_end(k, last) - 1;  // attributes stay as written
        continue;
      }
      if (!is(k, "?")) continue;
      size_t colon = 0;
      size_t end = 0;
      if (!find_arms(k, last, &colon, &end)) continue;
      const std::string middle = render(k + 1, colon);
      const std::string third = render(colon + 1, end);
      out.append(text_, copied, tokens_[k].end - copied);
      if (middle.size() + third.size() > kMaxArmsBytes) {
        out += gap(k) + middle + gap(colon - 1) + ":" + gap(colon) + third;
      } else {
        out += gap(k) + arm(k + 1, colon, middle, third) + gap(colon - 1) + ":" + gap(colon) +
               arm(colon + 1, end, third, middle);
      }
      copied = tokens_[end - 1].end;
      k = end - 1;
    }
    out.append(text_, copied, tokens_[last - 1].end - copied);
    return out;
  }

 private:
  bool is(size_t i, const char* spelling) const {
    const Token& t = tokens_[i];
    const size_t n = std::strlen(spelling);
    return t.kind != TokenKind::literal && t.end - t.begin == n && text_.compare(t.begin, n, spelling) == 0;
  }
  bool opens(size_t i) const { return is(i, "(") || is(i, "[") || is(i, "{"); }
  bool closes(size_t i) const { return is(i, ")") || is(i, "]") || is(i, "}"); }

  // The source between token i and the next one.
  std::string gap(size_t i) const { return text_.substr(tokens_[i].end, tokens_[i + 1].begin - tokens_[i].end); }

  // One past the `]]` closing the attribute that opens at token i (or `last`).
  size_t attribute_end(size_t i, size_t last) const {
    int depth = 0;
    for (size_t k = i; k < last; ++k) {
      if (opens(k)) ++depth;
      if (closes(k) && --depth == 0) return k + 1;
    }
    return last;
  }

  // For the `?` at token q: its `:` and one past the third operand. False where the
  // conditional is left alone (see the header).
  bool find_arms(size_t q, size_t last, size_t* colon, size_t* end) const {
    if (q + 1 >= last || is(q + 1, ":")) return false;  // `a ?: b` is not MSL
    int depth = 0;
    int pending = 0;  // nested `?` waiting for their `:`
    size_t k = q + 1;
    for (; k < last; ++k) {
      if (opens(k)) ++depth;
      else if (closes(k) && --depth < 0) return false;
      else if (depth == 0 && is(k, ";")) return false;
      else if (depth == 0 && is(k, "?")) ++pending;
      else if (depth == 0 && is(k, ":") && pending-- == 0) break;
    }
    if (k >= last || k == q + 1) return false;
    *colon = k;
    // The third operand is an assignment-expression: it ends at `,`, `;`, a `:` of an
    // enclosing conditional, a closing bracket, or the range. An unmatched `>` may close an
    // enclosing template argument list, and a `,` after an unmatched `<` may separate
    // template arguments: the extent is then unknown.
    depth = 0;
    pending = 0;
    int angles = 0;
    for (k = *colon + 1; k < last; ++k) {
      if (opens(k)) {
        ++depth;
        continue;
      }
      if (closes(k)) {
        if (--depth < 0) break;
        continue;
      }
      if (depth != 0) continue;
      if (is(k, ";")) break;
      if (is(k, ",")) {
        if (angles > 0) return false;
        break;
      }
      if (is(k, "?")) ++pending;
      if (is(k, ":") && pending-- == 0) break;
      angles += angle_depth_change(text_, tokens_[k]);
      if (angles < 0) return false;
    }
    if (k == *colon + 1) return false;
    *end = k;
    for (size_t i = q + 1; i < *end; ++i) {
      if (tokens_[i].kind == TokenKind::directive) return false;
      // A lambda (`](`, `]{`) or an attribute in an operand: not copied into decltype.
      if (is(i, "]") && i + 1 < *end && (is(i + 1, "(") || is(i + 1, "{") || is(i + 1, "<"))) return false;
      if (is(i, "[") && i + 1 < *end && is(i + 1, "[")) return false;
    }
    return true;
  }

  // `s` on one line (copies go into decltype and must not add lines): line comments dropped,
  // line breaks made spaces.
  static std::string one_line(const std::string& s) {
    std::string out;
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (quote != 0) {
        if (c == '\\' && i + 1 < s.size()) {
          out += c;
          out += s[++i];
          continue;
        }
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
        while (i < s.size() && s[i] != '\n') ++i;
        out += ' ';
        continue;
      }
      out += c == '\n' ? ' ' : c;
    }
    return out;
  }

  // The operand of tokens [first, last) rendered as `self`, cast as the header says; a lone
  // number or null pointer stays as written: `static_cast<int>(0)` is no null pointer
  // constant, and an integer literal already converts to bfloat one way only.
  std::string arm(size_t first, size_t last, const std::string& self, const std::string& other) const {
    if (last == first + 1 && (tokens_[first].kind == TokenKind::number || is(first, "NULL") || is(first, "nullptr"))) {
      return self;
    }
    // No comma outside parentheses: the conditional may be a macro argument.
    return "static_cast<::etm_msl::conditional_arm_t<void(::etm_msl::type_tag<decltype((" + one_line(self) +
           "))>, ::etm_msl::type_tag<decltype((" + one_line(other) + "))>)>>(" + self + ")";
  }

  const std::string& text_;
  const std::vector<Token>& tokens_;
};

bool names_bfloat(const std::string& text, const std::vector<Token>& tokens) {
  for (const Token& t : tokens) {
    if (t.kind == TokenKind::identifier && t.end - t.begin == 6 && text.compare(t.begin, 6, "bfloat") == 0) return true;
  }
  return false;
}

}  // namespace

std::string rewrite_bfloat_conditionals(const std::string& source, const std::vector<Token>& tokens) {
  if (tokens.empty() || !names_bfloat(source, tokens)) return source;
  return source.substr(0, tokens.front().begin) + ConditionalRewriter(source, tokens).render(0, tokens.size()) +
         source.substr(tokens.back().end);
}

}  // namespace etm::device::cpu
