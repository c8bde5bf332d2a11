#include "device/cpu/msl_overload_sets.h"

#include "device/cpu/msl_translator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

namespace etm::device::cpu {
namespace {

enum class ScopeKind { function, class_body, namespace_body };

class Folder {
 public:
  Folder(const std::string& text, const std::vector<Token>& tokens) : text_(text), tokens_(tokens) {}

  Status run(std::string* out, std::vector<Token>* out_tokens) {
    pair_brackets();
    // (scope, signature) -> the functions declared with it, in source order.
    std::map<std::pair<size_t, std::string>, std::vector<Member>> groups;
    bool any_spaces = false;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (!is(i, ")") || partner_[i] == SIZE_MAX) continue;
      if (scope_[i] != SIZE_MAX && scope_kind_[scope_[i]] == ScopeKind::function) continue;
      Member m;
      if (!member_at(i, &m)) continue;
      any_spaces = any_spaces || m.names_spaces;
      groups[{scope_[i], m.signature}].push_back(m);
    }
    // Class template specializations: `template <typename T> struct pointer_element<device T*> {`.
    for (size_t i = 1; i < tokens_.size(); ++i) {
      if (!is(i, "{") || partner_[i] == SIZE_MAX || !(is(i - 1, ">") || is(i - 1, ">>"))) continue;
      if (scope_[i] != SIZE_MAX && scope_kind_[scope_[i]] == ScopeKind::function) continue;
      Member m;
      if (!specialization_at(i, &m)) continue;
      any_spaces = any_spaces || m.names_spaces;
      groups[{scope_[i], m.signature}].push_back(m);
    }
    std::vector<std::pair<size_t, size_t>> blanked;  // byte ranges
    // `template <>` before a member function: an explicit specialization in class scope, which
    // clang accepts and g++ does not; as a plain overload it wins the same calls.
    for (size_t i = 0; i + 2 < tokens_.size(); ++i) {
      if (!is(i, "template") || !is(i + 1, "<") || !is(i + 2, ">")) continue;
      if (scope_[i] == SIZE_MAX || scope_kind_[scope_[i]] != ScopeKind::class_body) continue;
      size_t k = i + 3;
      while (k < tokens_.size() && !is(k, "(") && !is(k, "{") && !is(k, ";") && !is(k, "struct") && !is(k, "class")) ++k;
      if (!is(k, "(")) continue;  // a member class's specialization stays (and g++ reports it)
      blanked.push_back({tokens_[i].begin, tokens_[i + 2].end});
    }
    if (!any_spaces && blanked.empty()) return apply({}, out, out_tokens);
    for (auto& [key, members] : groups) {
      // The unqualified or `thread` one stays: Metal's default address space.
      size_t kept = 0;
      for (size_t k = 0; k < members.size(); ++k) {
        if (!members[k].names_other_spaces) {
          kept = k;
          break;
        }
      }
      for (size_t k = 0; k < members.size(); ++k) {
        const Member& m = members[k];
        if (m.as_written != members[kept].as_written) {
          blanked.push_back({tokens_[m.first].begin, tokens_[m.last].end});
        } else if (m.qualifier != SIZE_MAX) {
          blanked.push_back({tokens_[m.qualifier].begin, tokens_[m.qualifier].end});
        }
      }
    }
    // By start; of ranges starting together the longest first, so that it covers the others.
    std::sort(blanked.begin(), blanked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<TextEdit> edits;
    for (const auto& [b, e] : blanked) {
      edits.push_back({b, e, std::string(static_cast<size_t>(std::count(text_.begin() + b, text_.begin() + e, '\n')), '\n')});
    }
    return apply(edits, out, out_tokens);
  }

 private:
  Status apply(const std::vector<TextEdit>& edits, std::string* out, std::vector<Token>* out_tokens) const {
    std::string error;
    if (!apply_edits(text_, tokens_, edits, out, out_tokens, &error)) {
      return Status::error(std::string(kMslSourceName) + ":" + error);
    }
    return Status();
  }

  struct Member {
    size_t first = 0;             // the declaration's first token (a template header's included)
    size_t last = 0;              // its last token (`;` or the body's `}`)
    size_t qualifier = SIZE_MAX;  // the address-space token qualifying `*this`, if any
    std::string as_written;       // the declaration's tokens up to its body
    std::string signature;        // the same without address spaces (`constant` read as const)
    bool names_spaces = false;    // an address space appears in the declaration
    bool names_other_spaces = false;  // one other than `thread`
  };

  bool is(size_t i, const char* s) const {
    if (i >= tokens_.size() || tokens_[i].kind == TokenKind::directive) return false;
    const Token& t = tokens_[i];
    const size_t n = std::strlen(s);
    return t.end - t.begin == n && text_.compare(t.begin, n, s) == 0;
  }
  bool is_address_space(size_t i) const {
    return is(i, "device") || is(i, "threadgroup") || is(i, "constant") || is(i, "thread");
  }

  // Pairs brackets and records each token's innermost enclosing `{` (SIZE_MAX at file scope).
  void pair_brackets() {
    partner_ = cpu::pair_brackets(text_, tokens_);
    scope_.assign(tokens_.size(), SIZE_MAX);
    scope_kind_.assign(tokens_.size(), ScopeKind::function);
    std::vector<size_t> braces;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (is(i, "}") && partner_[i] != SIZE_MAX && is(partner_[i], "{") && !braces.empty()) braces.pop_back();
      scope_[i] = braces.empty() ? SIZE_MAX : braces.back();
      if (is(i, "{")) {
        braces.push_back(i);
        scope_kind_[i] = kind_of_scope(i);
      }
    }
  }

  // What the `{` at i opens: a class, a namespace (or `extern "C"`), else a function body
  // or a block in one.
  ScopeKind kind_of_scope(size_t i) const {
    for (size_t k = i; k-- > 0;) {
      if (is(k, ";") || is(k, "{") || is(k, "}") || tokens_[k].kind == TokenKind::directive) break;
      if (is(k, ")") || is(k, "]")) break;
      if (is(k, "struct") || is(k, "class") || is(k, "union")) return ScopeKind::class_body;
      if (is(k, "namespace") || is(k, "extern")) return ScopeKind::namespace_body;
    }
    return ScopeKind::function;
  }

  // A class template specialization whose body opens at `open`.
  bool specialization_at(size_t open, Member* m) const {
    size_t first = open;
    bool is_class = false;
    while (first > 0) {
      const size_t k = first - 1;
      if (is(k, ";") || is(k, "{") || is(k, "}") || tokens_[k].kind == TokenKind::directive) break;
      if ((is(k, ")") || is(k, "]")) && partner_[k] != SIZE_MAX) {
        first = partner_[k];
        continue;
      }
      is_class = is_class || is(k, "struct") || is(k, "class") || is(k, "union");
      first = k;
    }
    if (!is_class || !is(first, "template")) return false;
    m->first = first;
    m->last = partner_[open];
    describe(first, open, m);
    return true;
  }

  // A member function whose parameter list closes at `close`: `) [const|volatile]* [space]`
  // followed by its body, a constructor's initializers, `;` or `= default`.
  bool member_at(size_t close, Member* m) const {
    size_t j = close + 1;
    while (is(j, "const") || is(j, "volatile")) ++j;
    if (is_address_space(j)) m->qualifier = j++;
    while (is(j, "const") || is(j, "volatile")) ++j;
    size_t last = SIZE_MAX;
    if (is(j, ";")) {
      last = j;
    } else if (is(j, "{")) {
      last = partner_[j];
    } else if (is(j, "=") && (is(j + 1, "default") || is(j + 1, "delete")) && is(j + 2, ";")) {
      last = j + 2;
    } else if (is(j, ":") && !is(j + 1, ":")) {
      // Member initializers up to the body: `x(1), y{2} {`.
      for (size_t k = j + 1; k < tokens_.size(); ++k) {
        if ((is(k, "(") || is(k, "[")) && partner_[k] != SIZE_MAX) {
          k = partner_[k];
        } else if (is(k, "{") && partner_[k] != SIZE_MAX) {
          const bool braced_initializer = k > 0 && (tokens_[k - 1].kind == TokenKind::identifier || is(k - 1, ">"));
          if (!braced_initializer) {
            last = partner_[k];
            break;
          }
          k = partner_[k];
        } else if (is(k, ";") || is(k, "}")) {
          break;
        }
      }
    }
    if (last == SIZE_MAX) return false;
    // Back from the parameter list to the declaration's start.
    size_t first = partner_[close];
    while (first > 0) {
      const size_t k = first - 1;
      if (is(k, ";") || is(k, "{") || is(k, "}") || tokens_[k].kind == TokenKind::directive) break;
      if (is(k, ":") && k > 0 && (is(k - 1, "public") || is(k - 1, "private") || is(k - 1, "protected"))) break;
      if ((is(k, ")") || is(k, "]")) && partner_[k] != SIZE_MAX) {
        first = partner_[k];
        continue;
      }
      first = k;
    }
    if (first == partner_[close]) return false;  // no name before the parameters
    m->first = first;
    m->last = last;
    describe(first, j, m);
    return true;
  }

  // Fills m's texts and address-space flags from the tokens [first, end).
  void describe(size_t first, size_t end, Member* m) const {
    for (size_t k = first; k < end; ++k) {
      const std::string word(text_, tokens_[k].begin, tokens_[k].end - tokens_[k].begin);
      m->as_written += word + ' ';
      if (is_address_space(k)) {
        m->names_spaces = true;
        m->names_other_spaces = m->names_other_spaces || !is(k, "thread");
        if (!is(k, "constant") || k == m->qualifier) continue;
      }
      const std::string read = is(k, "constant") ? "const" : word;
      if (read == "const" && m->signature.size() >= 6 && m->signature.compare(m->signature.size() - 6, 6, "const ") == 0) {
        continue;  // `const constant T` is `const T`
      }
      m->signature += read + ' ';
    }
  }

  const std::string& text_;
  const std::vector<Token>& tokens_;
  std::vector<size_t> partner_;
  std::vector<size_t> scope_;
  std::vector<ScopeKind> scope_kind_;  // per `{`
};

}  // namespace

Status rewrite_overload_sets(const std::string& source, const std::vector<Token>& tokens, std::string* out,
                             std::vector<Token>* out_tokens) {
  return Folder(source, tokens).run(out, out_tokens);
}

}  // namespace etm::device::cpu
