#include "device/cpu/msl_translator.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

namespace etm::device::cpu {
namespace {

// An attribute's integer literal (decimal, hex or octal); UINT32_MAX when it does not fit,
// so that range checks reject it instead of seeing the value wrapped.
uint32_t attribute_integer(const std::string& text) {
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 0);
  return errno == ERANGE || value > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(value);
}

// ------------------------------------------------------------------------------ lexer

enum class TokenKind { identifier, number, literal, punctuator, directive };

struct Token {
  TokenKind kind;
  size_t begin;
  size_t end;
  int line;
};

bool is_identifier_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Multi-character punctuators, longest first.
const char* const kPunctuators[] = {"...", "<<=", ">>=", "->*", "::", "->", "++", "--", "<<",
                                    ">>",  "<=",  ">=",  "==",  "!=", "&&", "||", "+=", "-=",
                                    "*=",  "/=",  "%=",  "&=",  "|=", "^=", "##", ".*"};

// Splits C++ source into tokens. Comments and whitespace are skipped; a preprocessor
// directive (with its continuation lines) is one token.
class Lexer {
 public:
  explicit Lexer(const std::string& text) : text_(text) {}

  bool run(std::vector<Token>* tokens, std::string* error) {
    tokens->reserve(text_.size() / 4);
    bool line_start = true;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        ++pos_;
        line_start = true;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        ++pos_;
        continue;
      }
      if (c == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') {
        pos_ += 2;
        ++line_;
        continue;
      }
      if (c == '/' && peek(1) == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
        continue;
      }
      if (c == '/' && peek(1) == '*') {
        const size_t close = text_.find("*/", pos_ + 2);
        if (close == std::string::npos) {
          *error = "line " + std::to_string(line_) + ": unterminated comment";
          return false;
        }
        line_ += static_cast<int>(std::count(text_.begin() + pos_, text_.begin() + close, '\n'));
        pos_ = close + 2;
        continue;
      }
      const size_t begin = pos_;
      const int line = line_;
      if (c == '#' && line_start) {
        lex_directive();
        tokens->push_back({TokenKind::directive, begin, pos_, line});
        continue;
      }
      line_start = false;
      if (is_identifier_start(c)) {
        while (pos_ < text_.size() && is_identifier_char(text_[pos_])) ++pos_;
        // String literal prefixes (u8"", R"()", L'x').
        if (pos_ < text_.size() && (text_[pos_] == '"' || text_[pos_] == '\'')) {
          const std::string prefix = text_.substr(begin, pos_ - begin);
          if (prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" ||
              prefix == "LR") {
            if (!lex_raw_string(error)) return false;
            tokens->push_back({TokenKind::literal, begin, pos_, line});
            continue;
          }
          if (prefix == "u8" || prefix == "u" || prefix == "U" || prefix == "L") {
            if (!lex_quoted(text_[pos_], error)) return false;
            tokens->push_back({TokenKind::literal, begin, pos_, line});
            continue;
          }
        }
        tokens->push_back({TokenKind::identifier, begin, pos_, line});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1))))) {
        lex_number();
        tokens->push_back({TokenKind::number, begin, pos_, line});
        continue;
      }
      if (c == '"' || c == '\'') {
        if (!lex_quoted(c, error)) return false;
        tokens->push_back({TokenKind::literal, begin, pos_, line});
        continue;
      }
      size_t length = 1;
      for (const char* p : kPunctuators) {
        if (p[0] != c) continue;
        const size_t n = p[2] ? 3 : 2;
        if (pos_ + n <= text_.size() && std::memcmp(text_.data() + pos_, p, n) == 0) {
          length = n;
          break;
        }
      }
      pos_ += length;
      tokens->push_back({TokenKind::punctuator, begin, pos_, line});
    }
    return true;
  }

 private:
  char peek(size_t ahead) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  void lex_directive() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\\' && peek(1) == '\n') {
        pos_ += 2;
        ++line_;
        continue;
      }
      if (c == '\n') break;
      if (c == '/' && peek(1) == '*') {
        const size_t close = text_.find("*/", pos_ + 2);
        const size_t stop = close == std::string::npos ? text_.size() : close + 2;
        line_ += static_cast<int>(std::count(text_.begin() + pos_, text_.begin() + stop, '\n'));
        pos_ = stop;
        continue;
      }
      ++pos_;
    }
  }

  void lex_number() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if ((c == '+' || c == '-') && pos_ > 0) {
        const char before = static_cast<char>(std::tolower(text_[pos_ - 1]));
        if (before == 'e' || before == 'p') {
          ++pos_;
          continue;
        }
        break;
      }
      if (is_identifier_char(c) || c == '.' || c == '\'') {
        ++pos_;
        continue;
      }
      break;
    }
  }

  bool lex_quoted(char quote, std::string* error) {
    ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '\n') break;
      ++pos_;
    }
    if (pos_ >= text_.size() || text_[pos_] != quote) {
      *error = "line " + std::to_string(line_) + ": unterminated literal";
      return false;
    }
    ++pos_;
    return true;
  }

  bool lex_raw_string(std::string* error) {
    ++pos_;  // the opening quote
    const size_t paren = text_.find('(', pos_);
    if (paren == std::string::npos) {
      *error = "line " + std::to_string(line_) + ": malformed raw string literal";
      return false;
    }
    const std::string terminator = ")" + text_.substr(pos_, paren - pos_) + "\"";
    const size_t close = text_.find(terminator, paren);
    if (close == std::string::npos) {
      *error = "line " + std::to_string(line_) + ": unterminated raw string literal";
      return false;
    }
    line_ += static_cast<int>(std::count(text_.begin() + pos_, text_.begin() + close, '\n'));
    pos_ = close + terminator.size();
    return true;
  }

  const std::string& text_;
  size_t pos_ = 0;
  int line_ = 1;
};

// ---------------------------------------------------------------- macro expansion
//
// Kernels and their [[host_name]] instantiations are often produced by macros (ATen's
// REGISTER_* / INSTANTIATE_* helpers). The translator must see them, so invocations of
// the source's own macros whose expansion contains kernel syntax are expanded here, with
// the C preprocessor's rules (argument pre-expansion, #, ##, __VA_ARGS__, no recursion).
// Each expansion stays on the line of its invocation, and the newlines it consumed follow
// it, so line numbers do not move. Other macros are left to the compiler.

struct MacroToken {
  std::string text;
  bool identifier = false;
};

struct Macro {
  bool function_like = false;
  bool variadic = false;
  std::vector<std::string> parameters;
  std::vector<MacroToken> body;
};

using MacroTable = std::map<std::string, Macro>;

std::vector<MacroToken> lex_fragment(const std::string& text) {
  std::vector<Token> tokens;
  std::string error;
  Lexer(text).run(&tokens, &error);
  std::vector<MacroToken> out;
  for (const Token& t : tokens) {
    if (t.kind == TokenKind::directive) continue;
    out.push_back({text.substr(t.begin, t.end - t.begin), t.kind == TokenKind::identifier});
  }
  return out;
}

// Parses the text of a `#define` directive; returns the macro's name, or "" if malformed.
std::string parse_define(const std::string& directive, Macro* macro) {
  std::string line;
  for (size_t i = 0; i < directive.size(); ++i) {
    if (directive[i] == '\\' && i + 1 < directive.size() && directive[i + 1] == '\n') {
      ++i;
      line += ' ';
      continue;
    }
    line += directive[i];
  }
  size_t p = line.find('#') + 1;
  auto skip_space = [&] {
    while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
  };
  skip_space();
  if (line.compare(p, 6, "define") != 0) return "";
  p += 6;
  skip_space();
  const size_t name_begin = p;
  while (p < line.size() && is_identifier_char(line[p])) ++p;
  const std::string name = line.substr(name_begin, p - name_begin);
  if (name.empty()) return "";
  if (p < line.size() && line[p] == '(') {
    macro->function_like = true;
    const size_t close = line.find(')', p);
    if (close == std::string::npos) return "";
    std::string parameter;
    std::stringstream list(line.substr(p + 1, close - p - 1));
    while (std::getline(list, parameter, ',')) {
      const size_t a = parameter.find_first_not_of(" \t");
      const size_t b = parameter.find_last_not_of(" \t");
      if (a == std::string::npos) continue;
      parameter = parameter.substr(a, b - a + 1);
      if (parameter == "...") {
        macro->variadic = true;
      } else if (parameter.size() > 3 && parameter.compare(parameter.size() - 3, 3, "...") == 0) {
        return "";  // named variadic parameters (a GNU extension) are not expanded here
      } else {
        macro->parameters.push_back(parameter);
      }
    }
    p = close + 1;
  }
  macro->body = lex_fragment(line.substr(p));
  return name;
}

bool mentions_kernel_syntax(const std::vector<MacroToken>& body) {
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string& t = body[i].text;
    if (t == "kernel" || t == "host_name" || t == "threadgroup") return true;
    if (t == "[" && i + 1 < body.size() && body[i + 1].text == "[") return true;
  }
  return false;
}

class MacroExpander {
 public:
  explicit MacroExpander(const MacroTable& macros) : macros_(macros) {}

  // True when expanding `name` can produce kernel syntax.
  bool is_relevant(const std::string& name) {
    std::set<std::string> visiting;
    return relevant(name, &visiting);
  }

  // Expands `tokens` fully; `disabled` holds the macros being expanded (no recursion).
  std::vector<MacroToken> expand(const std::vector<MacroToken>& tokens,
                                 std::set<std::string> disabled) {
    std::vector<MacroToken> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const MacroToken& t = tokens[i];
      auto found = t.identifier ? macros_.find(t.text) : macros_.end();
      if (found == macros_.end() || disabled.count(t.text) != 0) {
        out.push_back(t);
        continue;
      }
      const Macro& macro = found->second;
      std::vector<MacroToken> replaced;
      if (!macro.function_like) {
        replaced = macro.body;
      } else {
        if (i + 1 >= tokens.size() || tokens[i + 1].text != "(") {
          out.push_back(t);
          continue;
        }
        std::vector<std::vector<MacroToken>> arguments;
        size_t close = 0;
        if (!collect_arguments(tokens, i + 1, &arguments, &close)) {
          out.push_back(t);
          continue;
        }
        replaced = substitute(macro, arguments, disabled);
        i = close;
      }
      std::set<std::string> inner = disabled;
      inner.insert(t.text);
      const std::vector<MacroToken> expanded = expand(replaced, inner);
      out.insert(out.end(), expanded.begin(), expanded.end());
    }
    return out;
  }

  // Splits the arguments of an invocation whose "(" is tokens[open].
  static bool collect_arguments(const std::vector<MacroToken>& tokens, size_t open,
                                std::vector<std::vector<MacroToken>>* arguments,
                                size_t* close) {
    int depth = 0;
    arguments->assign(1, {});
    for (size_t j = open; j < tokens.size(); ++j) {
      const std::string& text = tokens[j].text;
      if (text == "(") {
        if (depth++ == 0) continue;
      } else if (text == ")") {
        if (--depth == 0) {
          *close = j;
          return true;
        }
      } else if (text == "," && depth == 1) {
        arguments->emplace_back();
        continue;
      }
      arguments->back().push_back(tokens[j]);
    }
    return false;
  }

 private:
  bool relevant(const std::string& name, std::set<std::string>* visiting) {
    auto found = macros_.find(name);
    if (found == macros_.end() || !visiting->insert(name).second) return false;
    if (mentions_kernel_syntax(found->second.body)) return true;
    for (const MacroToken& t : found->second.body) {
      if (t.identifier && relevant(t.text, visiting)) return true;
    }
    return false;
  }

  static std::string stringify(const std::vector<MacroToken>& argument) {
    std::string out = "\"";
    for (size_t i = 0; i < argument.size(); ++i) {
      if (i) out += ' ';
      const std::string& text = argument[i].text;
      const bool literal = !text.empty() && (text.back() == '"' || text.back() == '\'');
      for (char c : text) {
        if (literal && (c == '"' || c == '\\')) out += '\\';
        out += c;
      }
    }
    return out + "\"";
  }

  std::vector<MacroToken> substitute(const Macro& macro,
                                     const std::vector<std::vector<MacroToken>>& arguments,
                                     const std::set<std::string>& disabled) {
    auto argument_of = [&](const std::string& name) -> const std::vector<MacroToken>* {
      for (size_t k = 0; k < macro.parameters.size(); ++k) {
        if (macro.parameters[k] == name) {
          static const std::vector<MacroToken> empty;
          return k < arguments.size() ? &arguments[k] : &empty;
        }
      }
      if (macro.variadic && name == "__VA_ARGS__") {
        variadic_.clear();
        for (size_t k = macro.parameters.size(); k < arguments.size(); ++k) {
          if (k > macro.parameters.size()) variadic_.push_back({",", false});
          variadic_.insert(variadic_.end(), arguments[k].begin(), arguments[k].end());
        }
        return &variadic_;
      }
      return nullptr;
    };
    const std::vector<MacroToken>& body = macro.body;
    std::vector<MacroToken> out;
    // Marks tokens in `out` that must be pasted to the next one.
    std::vector<bool> paste_next;
    for (size_t i = 0; i < body.size(); ++i) {
      const MacroToken& t = body[i];
      if (t.text == "#" && i + 1 < body.size()) {
        if (const auto* argument = argument_of(body[i + 1].text)) {
          out.push_back({stringify(*argument), false});
          paste_next.push_back(false);
          ++i;
          continue;
        }
      }
      if (t.text == "##") {
        if (!paste_next.empty()) paste_next.back() = true;
        continue;
      }
      const bool next_is_paste = i + 1 < body.size() && body[i + 1].text == "##";
      const bool previous_is_paste = i > 0 && body[i - 1].text == "##";
      if (const auto* argument = t.identifier ? argument_of(t.text) : nullptr) {
        std::vector<MacroToken> value =
            (next_is_paste || previous_is_paste) ? *argument : expand(*argument, disabled);
        if (value.empty()) value.push_back({"", false});
        for (const MacroToken& v : value) {
          out.push_back(v);
          paste_next.push_back(false);
        }
        continue;
      }
      out.push_back(t);
      paste_next.push_back(false);
    }
    std::vector<MacroToken> pasted;
    for (size_t i = 0; i < out.size(); ++i) {
      MacroToken t = out[i];
      while (i < out.size() && paste_next[i] && i + 1 < out.size()) {
        t.text += out[i + 1].text;
        ++i;
      }
      t.identifier = !t.text.empty() && is_identifier_start(t.text[0]) &&
                     std::all_of(t.text.begin(), t.text.end(), is_identifier_char);
      if (!t.text.empty()) pasted.push_back(t);
    }
    return pasted;
  }

  const MacroTable& macros_;
  std::vector<MacroToken> variadic_;
};

// Returns the source with kernel-producing macro invocations expanded (or unchanged).
std::string expand_kernel_macros(const std::string& source, const std::vector<Token>& tokens) {
  MacroTable macros;
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (t.kind == TokenKind::directive) {
      const std::string directive = source.substr(t.begin, t.end - t.begin);
      Macro macro;
      const std::string name = parse_define(directive, &macro);
      if (!name.empty()) {
        macros[name] = macro;
        continue;
      }
      std::istringstream words(directive.substr(directive.find('#') + 1));
      std::string keyword, undefined;
      words >> keyword >> undefined;
      if (keyword == "undef") macros.erase(undefined);
      continue;
    }
    if (t.kind != TokenKind::identifier || macros.empty()) continue;
    const std::string name = source.substr(t.begin, t.end - t.begin);
    auto found = macros.find(name);
    if (found == macros.end()) continue;
    MacroExpander expander(macros);
    if (!expander.is_relevant(name)) continue;
    // Gather the invocation's tokens (stopping at a directive, which cannot be inside).
    size_t last = i;
    if (found->second.function_like) {
      if (i + 1 >= tokens.size() || source.compare(tokens[i + 1].begin, 1, "(") != 0) continue;
      int depth = 0;
      size_t j = i + 1;
      for (; j < tokens.size() && tokens[j].kind != TokenKind::directive; ++j) {
        const char c = source[tokens[j].begin];
        const bool single = tokens[j].end - tokens[j].begin == 1;
        if (single && c == '(') ++depth;
        if (single && c == ')' && --depth == 0) break;
      }
      if (j >= tokens.size() || tokens[j].kind == TokenKind::directive) continue;
      last = j;
    }
    std::vector<MacroToken> invocation;
    for (size_t k = i; k <= last; ++k) {
      invocation.push_back({source.substr(tokens[k].begin, tokens[k].end - tokens[k].begin),
                            tokens[k].kind == TokenKind::identifier});
    }
    const std::vector<MacroToken> expanded = expander.expand(invocation, {});
    out.append(source, copied, t.begin - copied);
    for (const MacroToken& e : expanded) {
      out += e.text;
      out += ' ';
    }
    out.append(static_cast<size_t>(std::count(source.begin() + t.begin,
                                              source.begin() + tokens[last].end, '\n')),
               '\n');
    copied = tokens[last].end;
    i = last;
  }
  if (copied == 0) return source;
  out.append(source, copied, std::string::npos);
  return out;
}

// --------------------------------------------------------------------- translation

struct ThreadAttribute {
  const char* name;
  // Per component, an expression over the generated wrapper's locals.
  const char* components[3];
};

// etm__x/y/z: position in the threadgroup; etm__index: linear index in the threadgroup.
const ThreadAttribute kThreadAttributes[] = {
    {"thread_position_in_grid",
     {"etm__group->origin[0] + etm__x", "etm__group->origin[1] + etm__y",
      "etm__group->origin[2] + etm__z"}},
    {"thread_position_in_threadgroup", {"etm__x", "etm__y", "etm__z"}},
    {"threadgroup_position_in_grid",
     {"etm__group->position[0]", "etm__group->position[1]", "etm__group->position[2]"}},
    {"threads_per_threadgroup",
     {"etm__group->size[0]", "etm__group->size[1]", "etm__group->size[2]"}},
    {"dispatch_threads_per_threadgroup",
     {"etm__launch->threads_per_group[0]", "etm__launch->threads_per_group[1]",
      "etm__launch->threads_per_group[2]"}},
    {"threads_per_grid", {"etm__launch->grid[0]", "etm__launch->grid[1]", "etm__launch->grid[2]"}},
    {"threadgroups_per_grid",
     {"etm__launch->groups[0]", "etm__launch->groups[1]", "etm__launch->groups[2]"}},
    {"thread_index_in_threadgroup", {"etm__index", "0u", "0u"}},
    {"thread_index_in_simdgroup", {"(etm__index & 31u)", "0u", "0u"}},
    {"simdgroup_index_in_threadgroup", {"(etm__index >> 5)", "0u", "0u"}},
    {"simdgroups_per_threadgroup", {"((etm__group->thread_count + 31u) >> 5)", "0u", "0u"}},
    {"dispatch_simdgroups_per_threadgroup",
     {"((etm__launch->threads_per_group[0] * etm__launch->threads_per_group[1] * "
      "etm__launch->threads_per_group[2] + 31u) >> 5)",
      "0u", "0u"}},
    {"threads_per_simdgroup", {"32u", "0u", "0u"}},
    {"thread_execution_width", {"32u", "0u", "0u"}},
    {"thread_index_in_quadgroup", {"(etm__index & 3u)", "0u", "0u"}},
    {"quadgroup_index_in_threadgroup", {"(etm__index >> 2)", "0u", "0u"}},
    {"quadgroups_per_threadgroup", {"((etm__group->thread_count + 3u) >> 2)", "0u", "0u"}},
    {"dispatch_quadgroups_per_threadgroup",
     {"((etm__launch->threads_per_group[0] * etm__launch->threads_per_group[1] * "
      "etm__launch->threads_per_group[2] + 3u) >> 2)",
      "0u", "0u"}},
};

const ThreadAttribute* find_thread_attribute(const std::string& name) {
  for (const ThreadAttribute& a : kThreadAttributes) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// Standard C++ attributes survive; every other [[...]] is MSL's and is removed.
bool is_standard_attribute(const std::string& name) {
  static const std::set<std::string> kStandard = {
      "maybe_unused", "nodiscard", "likely", "unlikely", "fallthrough", "noreturn",
      "deprecated",   "gnu",       "clang",  "carries_dependency", "no_unique_address"};
  return kStandard.count(name) != 0;
}

struct Edit {
  size_t begin;
  size_t end;
  std::string replacement;
};

struct AttributeItem {
  std::string name;
  std::vector<std::string> arguments;  // token texts inside the parentheses
};

struct Parameter {
  std::string type;   // as written, attributes removed, address spaces kept (macros)
  std::string name;   // may be empty
  bool is_array = false;
  bool is_pointer = false;
  bool is_reference = false;
  bool read_only = false;  // `constant`, or `const` before the `*` / `&`
  std::vector<AttributeItem> attributes;
};

struct KernelTemplate {
  std::string name;
  std::vector<std::string> namespace_path;
  std::string wrapper_name;
  std::vector<Parameter> parameters;
  uint32_t max_total_threads_per_threadgroup = 0;
};

class Translator {
 public:
  Translator(const std::string& text, const MslTranslationOptions& options)
      : text_(text), options_(options) {}

  Status run(MslTranslation* out) {
    std::string error;
    if (!Lexer(text_).run(&tokens_, &error)) return Status::error(error);
    match_brackets();
    strip_attributes_and_constant();
    scan_scope(0, tokens_.size(), {});
    if (!error_.empty()) return Status::error(error_);
    if (options_.suffix_float_literals) suffix_float_literals();

    std::sort(edits_.begin(), edits_.end(), [](const Edit& a, const Edit& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::string body;
    size_t copied = 0;
    for (const Edit& e : edits_) {
      if (e.begin < copied) continue;  // inside a range an earlier edit replaced
      body.append(text_, copied, e.begin - copied);
      body += e.replacement;
      copied = e.end;
    }
    body.append(text_, copied, std::string::npos);

    out->source = "#include \"etm_cpu_kernel.h\"\n#include <metal_stdlib>\n#line 1 \"" +
                  std::string(kMslSourceName) + "\"\n" + body + "\n";
    out->kernels = std::move(kernels_);
    return Status();
  }

 private:
  // ---- token helpers
  std::string spell(size_t i) const {
    return text_.substr(tokens_[i].begin, tokens_[i].end - tokens_[i].begin);
  }
  bool is(size_t i, const char* s) const {
    if (i >= tokens_.size()) return false;
    const Token& t = tokens_[i];
    const size_t n = std::strlen(s);
    return t.kind != TokenKind::directive && t.end - t.begin == n &&
           text_.compare(t.begin, n, s) == 0;
  }
  bool is_identifier(size_t i) const {
    return i < tokens_.size() && tokens_[i].kind == TokenKind::identifier;
  }
  bool is_directive(size_t i) const {
    return i < tokens_.size() && tokens_[i].kind == TokenKind::directive;
  }
  // `[[` that opens an attribute specifier (not a lambda in a subscript).
  bool opens_attribute(size_t i) const {
    return is(i, "[") && is(i + 1, "[") && (is_identifier(i + 2) || is(i + 2, "]"));
  }
  void fail(int line, const std::string& message) {
    if (error_.empty()) error_ = std::string(kMslSourceName) + ":" + std::to_string(line) + ": " + message;
  }
  void erase(size_t first, size_t last) {  // tokens [first, last], keeping line breaks
    const size_t b = tokens_[first].begin, e = tokens_[last].end;
    edits_.push_back({b, e, std::string(std::count(text_.begin() + b, text_.begin() + e, '\n'), '\n')});
  }
  void insert_after(size_t i, std::string code) {
    edits_.push_back({tokens_[i].end, tokens_[i].end, std::move(code)});
  }

  // Pairs (), [], {} once, so scanning can jump over groups.
  void match_brackets() {
    partner_.assign(tokens_.size(), SIZE_MAX);
    std::vector<size_t> stack;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (tokens_[i].kind != TokenKind::punctuator) continue;
      const char c = text_[tokens_[i].begin];
      if (tokens_[i].end - tokens_[i].begin != 1) continue;
      if (c == '(' || c == '[' || c == '{') {
        stack.push_back(i);
      } else if (c == ')' || c == ']' || c == '}') {
        if (stack.empty()) continue;
        partner_[stack.back()] = i;
        partner_[i] = stack.back();
        stack.pop_back();
      }
    }
  }
  size_t partner(size_t i) const { return i < partner_.size() ? partner_[i] : SIZE_MAX; }

  // From a `<` at i, the matching `>` (template argument lists), or SIZE_MAX.
  size_t match_angle(size_t i, size_t limit) const {
    int depth = 0;
    for (size_t j = i; j < limit; ++j) {
      if (is(j, "(") || is(j, "[") || is(j, "{")) {
        if (partner(j) == SIZE_MAX) return SIZE_MAX;
        j = partner(j);
        continue;
      }
      if (is(j, "<")) ++depth;
      if (is(j, ">")) --depth;
      if (is(j, ">>")) depth -= 2;
      if (depth <= 0 && j > i) return depth == 0 ? j : SIZE_MAX;
      if (is(j, ";") || is(j, "{") || is(j, "}")) return SIZE_MAX;
    }
    return SIZE_MAX;
  }

  // Parses the attribute specifier opened at i; returns the index of its final `]`.
  size_t parse_attribute(size_t i, std::vector<AttributeItem>* items) const {
    const size_t outer = partner(i);
    if (outer == SIZE_MAX) return i;
    const size_t inner_end = partner(i + 1);
    size_t j = i + 2;
    while (j < inner_end) {
      AttributeItem item;
      if (is_identifier(j)) item.name = spell(j);
      ++j;
      while (is(j, "::") && is_identifier(j + 1)) {
        item.name += "::" + spell(j + 1);
        j += 2;
      }
      if (is(j, "(")) {
        const size_t close = partner(j);
        for (size_t k = j + 1; k < close; ++k) item.arguments.push_back(spell(k));
        j = close + 1;
      }
      while (j < inner_end && !is(j, ",")) ++j;
      ++j;
      if (!item.name.empty() && items) items->push_back(item);
    }
    return outer;
  }

  // Removes MSL attributes everywhere (kernel signatures are parsed before edits apply),
  // and turns `constant` into `const` unless the declaration already says const.
  void strip_attributes_and_constant() {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (opens_attribute(i)) {
        std::vector<AttributeItem> items;
        const size_t close = parse_attribute(i, &items);
        if (close == i) continue;
        for (const AttributeItem& item : items) {
          if (item.name == "function_constant") {
            fail(tokens_[i].line, "[[function_constant]] is not supported by the CPU device");
          }
        }
        std::string first = items.empty() ? "" : items[0].name;
        first = first.substr(0, first.find("::"));
        if (!is_standard_attribute(first)) erase(i, close);
        i = close;
        continue;
      }
      if (is(i, "constant")) {
        edits_.push_back({tokens_[i].begin, tokens_[i].end, declaration_has_const(i) ? "" : "const"});
      }
    }
  }

  bool declaration_has_const(size_t i) const {
    auto stops = [&](size_t k) {
      return is(k, "(") || is(k, ",") || is(k, ";") || is(k, "{") || is(k, "}") || is(k, "<") ||
             is(k, ">") || is(k, "=") || is(k, "*") || is(k, "&") || is(k, "[") || is(k, ")") ||
             is_directive(k);
    };
    for (size_t k = i; k-- > 0 && !stops(k);) {
      if (is(k, "const")) return true;
    }
    for (size_t k = i + 1; k < tokens_.size() && !stops(k); ++k) {
      if (is(k, "const")) return true;
    }
    return false;
  }

  // Unsuffixed floating literals become float literals.
  void suffix_float_literals() {
    for (const Token& t : tokens_) {
      if (t.kind != TokenKind::number) continue;
      const std::string n = text_.substr(t.begin, t.end - t.begin);
      if (n.size() > 1 && n[0] == '0' && (n[1] == 'x' || n[1] == 'X')) continue;
      const bool floating = n.find('.') != std::string::npos ||
                            n.find_first_of("eE") != std::string::npos;
      if (!floating || std::isalpha(static_cast<unsigned char>(n.back()))) continue;
      edits_.push_back({t.end, t.end, "f"});
    }
  }

  // ---- scopes and declarations

  void scan_scope(size_t i, size_t end, const std::vector<std::string>& namespace_path) {
    while (i < end && error_.empty()) {
      if (is_directive(i) || is(i, ";")) {
        ++i;
        continue;
      }
      if (is(i, "namespace") || (is(i, "inline") && is(i + 1, "namespace"))) {
        size_t j = is(i, "inline") ? i + 2 : i + 1;
        std::vector<std::string> path = namespace_path;
        while (j < end && !is(j, "{") && !is(j, "=") && !is(j, ";")) {
          if (is_identifier(j) && !is(j, "inline")) path.push_back(spell(j));
          ++j;
        }
        if (is(j, "{") && partner(j) != SIZE_MAX) {
          scan_scope(j + 1, partner(j), path);
          i = partner(j) + 1;
        } else {
          while (j < end && !is(j, ";")) ++j;
          i = j + 1;
        }
        continue;
      }
      if (is(i, "extern") && i + 2 < end && tokens_[i + 1].kind == TokenKind::literal &&
          is(i + 2, "{") && partner(i + 2) != SIZE_MAX) {
        scan_scope(i + 3, partner(i + 2), namespace_path);
        i = partner(i + 2) + 1;
        continue;
      }
      if (is(i, "}")) {
        ++i;
        continue;
      }
      const size_t declaration_end = find_declaration_end(i, end);
      handle_declaration(i, declaration_end, namespace_path);
      i = declaration_end;
    }
  }

  // One past the last token of the declaration starting at i.
  size_t find_declaration_end(size_t i, size_t end) const {
    bool saw_parameters = false, saw_assignment = false;
    for (size_t j = i; j < end; ++j) {
      if (is_directive(j)) continue;
      if (is(j, "(") || is(j, "[")) {
        if (partner(j) == SIZE_MAX) return end;
        if (is(j, "(")) saw_parameters = true;
        j = partner(j);
        continue;
      }
      if (is(j, "=")) saw_assignment = true;
      if (is(j, ";")) return j + 1;
      if (is(j, "}")) return j;
      if (is(j, "{")) {
        if (partner(j) == SIZE_MAX) return end;
        if (saw_parameters && !saw_assignment) return partner(j) + 1;
        j = partner(j);
      }
    }
    return end;
  }

  void handle_declaration(size_t begin, size_t end, const std::vector<std::string>& namespace_path) {
    // Threadgroup variables live in function bodies anywhere in the declaration.
    for (size_t j = begin; j < end; ++j) {
      if (is(j, "{") && partner(j) != SIZE_MAX && partner(j) < end) {
        rewrite_threadgroup_declarations(j + 1, partner(j));
        j = partner(j);
      }
    }

    size_t p = begin;
    bool is_template = false, is_instantiation = false;
    size_t template_close = SIZE_MAX;
    if (is(p, "template")) {
      if (is(p + 1, "<")) {
        template_close = match_angle(p + 1, end);
        if (template_close == SIZE_MAX) return;
        is_template = true;
        p = template_close + 1;
      } else {
        is_instantiation = true;
        ++p;
      }
    }
    // The head up to the parameter list: attributes, specifiers, `kernel`.
    bool kernel = false;
    size_t kernel_token = SIZE_MAX;
    std::vector<AttributeItem> attributes;
    size_t parameters_open = SIZE_MAX;
    size_t first_specifier = SIZE_MAX;
    bool has_inline = false;
    for (size_t j = p; j < end; ++j) {
      if (opens_attribute(j)) {
        j = parse_attribute(j, &attributes);
        continue;
      }
      if (first_specifier == SIZE_MAX) first_specifier = j;
      if (is(j, "kernel")) {
        kernel = true;
        kernel_token = j;
      }
      if (is(j, "inline")) has_inline = true;
      if (is(j, "decltype") && is(j + 1, "(") && partner(j + 1) != SIZE_MAX) {
        j = partner(j + 1);
        continue;
      }
      if (is(j, "(")) {
        parameters_open = j;
        break;
      }
      if (is(j, ";") || is(j, "{") || is(j, "=")) break;
    }
    for (const AttributeItem& a : attributes) {
      if (a.name == "kernel") kernel = true;
    }
    if (!kernel) return;
    const int line = tokens_[begin].line;

    std::string host_name;
    uint32_t max_threads = 0;
    for (const AttributeItem& a : attributes) {
      if (a.name == "host_name") {
        for (const std::string& s : a.arguments) {
          if (s.size() >= 2 && s.front() == '"') host_name += s.substr(1, s.size() - 2);
        }
      } else if (a.name == "max_total_threads_per_threadgroup") {
        if (a.arguments.size() != 1 ||
            !std::isdigit(static_cast<unsigned char>(a.arguments[0][0]))) {
          return fail(line, "max_total_threads_per_threadgroup needs an integer literal");
        }
        max_threads = attribute_integer(a.arguments[0]);
        if (max_threads == 0 || max_threads > 1024) {
          return fail(line, "max_total_threads_per_threadgroup must be in 1..1024");
        }
      }
    }

    if (is_instantiation) {
      return handle_instantiation(begin, end, parameters_open, host_name, max_threads, line);
    }
    if (parameters_open == SIZE_MAX || partner(parameters_open) == SIZE_MAX) {
      return fail(line, "cannot parse the kernel declaration");
    }
    const size_t name_token = parameters_open - 1;
    if (!is_identifier(name_token)) return fail(line, "cannot find the kernel's name");
    const std::string name = spell(name_token);

    // `kernel` goes; the function becomes inline so that only the kernels an object is
    // built for are compiled to code.
    if (kernel_token != SIZE_MAX) {
      edits_.push_back({tokens_[kernel_token].begin, tokens_[kernel_token].end, has_inline ? "" : "inline"});
    } else if (!has_inline && first_specifier != SIZE_MAX) {
      edits_.push_back({tokens_[first_specifier].begin, tokens_[first_specifier].begin, "inline "});
    }

    std::vector<Parameter> parameters;
    if (!parse_parameters(parameters_open, &parameters, line)) return;
    // A qualified definition (`ns::f`) defines a kernel C++ requires to be declared in its
    // namespace already; the wrapper was emitted there.
    if (is(name_token - 1, "::")) return;
    const std::string key = join_path(namespace_path) + "::" + name;
    if (!declared_kernels_.insert(key).second) return;  // wrapper emitted at first declaration

    const size_t last = end - 1;
    std::string call_target = name;
    std::string template_header;
    std::string wrapper_name = "etm__kernel_" + name;
    if (is_template) {
      std::vector<std::string> names;
      if (!template_parameter_names(begin + 1, template_close, &names)) {
        return fail(line, "cannot parse the template parameters of kernel '" + name + "'");
      }
      template_header = "template " + text_.substr(tokens_[begin + 1].begin,
                                                    tokens_[template_close].end - tokens_[begin + 1].begin) + " ";
      call_target += "<" + join(names, ", ") + ">";
      templates_.push_back({name, namespace_path, wrapper_name, parameters, max_threads});
    }
    std::string code;
    if (!wrapper_code(name, template_header, wrapper_name, call_target, parameters, line, &code)) return;
    if (!is_template) {
      TranslatedKernel k;
      k.name = host_name.empty() ? name : host_name;
      if (!bind_arguments(parameters, &k, line)) return;
      k.max_total_threads_per_threadgroup = max_threads;
      k.line = line;
      k.entry_index = static_cast<uint32_t>(kernels_.size());
      code += entry_code(k.entry_index, wrapper_name, line);
      if (!add_kernel(std::move(k), line)) return;
    }
    insert_after(last, "\n" + code + "\n#line " + std::to_string(tokens_[last].line) + "\n");
  }

  void handle_instantiation(size_t begin, size_t end, size_t parameters_open,
                            const std::string& host_name, uint32_t max_threads, int line) {
    // The declarator: the qualified id before the parameter list, or before `;` for the
    // `decltype(f<T>) f<T>;` spelling.
    const size_t stop = parameters_open != SIZE_MAX ? parameters_open : end - 1;
    size_t close_angle = stop - 1;
    if (!is(close_angle, ">")) {
      return fail(line, "an explicit kernel instantiation needs explicit template arguments");
    }
    size_t open_angle = SIZE_MAX;
    int depth = 0;
    for (size_t j = close_angle + 1; j-- > begin;) {
      if (is(j, ")") || is(j, "]")) {
        j = partner(j);
        continue;
      }
      if (is(j, ">")) ++depth;
      if (is(j, ">>")) depth += 2;
      if (is(j, "<") && --depth == 0) {
        open_angle = j;
        break;
      }
    }
    if (open_angle == SIZE_MAX || !is_identifier(open_angle - 1)) {
      return fail(line, "cannot parse the kernel instantiation");
    }
    const std::string base = spell(open_angle - 1);
    // The qualifier as written (`::c10::metal::`), walking back over `name ::` pairs; the
    // return type `void` ends it.
    std::string qualifier;
    for (size_t j = open_angle - 1; j > begin && is(j - 1, "::");) {
      if (j >= 2 && is_identifier(j - 2) && !is(j - 2, "void") && !is(j - 2, "kernel")) {
        qualifier = spell(j - 2) + "::" + qualifier;
        j -= 2;
      } else {
        qualifier = "::" + qualifier;
        break;
      }
    }
    const std::string arguments =
        text_.substr(tokens_[open_angle + 1].begin, tokens_[close_angle].begin - tokens_[open_angle + 1].begin);

    const KernelTemplate* found = nullptr;
    for (const KernelTemplate& t : templates_) {
      if (t.name != base) continue;
      if (!found || ends_with_path(t.namespace_path, qualifier)) found = &t;
    }
    if (!found) return fail(line, "instantiation of unknown kernel template '" + base + "'");
    if (host_name.empty()) return fail(line, "kernel instantiation of '" + base + "' needs [[host_name(\"...\")]]");

    // Arguments bind as the primary template's parameters say.
    TranslatedKernel k;
    k.name = host_name;
    if (!bind_arguments(found->parameters, &k, line)) return;
    k.max_total_threads_per_threadgroup =
        max_threads ? max_threads : found->max_total_threads_per_threadgroup;
    k.line = line;
    k.entry_index = static_cast<uint32_t>(kernels_.size());
    const std::string target = qualifier + found->wrapper_name + "<" + arguments + ">";
    const std::string code = entry_code(k.entry_index, target, line);
    if (!add_kernel(std::move(k), line)) return;
    // The instantiation itself goes: the entry point instantiates what it needs.
    erase(begin, end - 1);
    insert_after(end - 1, "\n" + code + "\n#line " + std::to_string(tokens_[end - 1].line) + "\n");
  }

  bool add_kernel(TranslatedKernel k, int line) {
    for (const TranslatedKernel& other : kernels_) {
      if (other.name == k.name) {
        fail(line, "two kernels are named '" + k.name + "' (the other at line " + std::to_string(other.line) + ")");
        return false;
      }
    }
    kernels_.push_back(std::move(k));
    return true;
  }

  static bool ends_with_path(const std::vector<std::string>& path, const std::string& qualifier) {
    std::string q = qualifier;
    while (!q.empty() && q.front() == ':') q.erase(0, 1);
    if (q.size() >= 2) q.resize(q.size() - 2);  // trailing ::
    const std::string full = join_path(path);
    return q.empty() || full == q || (full.size() > q.size() &&
                                      full.compare(full.size() - q.size(), q.size(), q) == 0 &&
                                      full[full.size() - q.size() - 1] == ':');
  }

  static std::string join(const std::vector<std::string>& parts, const char* separator) {
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
    return out;
  }
  static std::string join_path(const std::vector<std::string>& path) { return join(path, "::"); }

  // Names of template parameters between `<` (at open) and `>` (at close), packs expanded.
  bool template_parameter_names(size_t open, size_t close, std::vector<std::string>* names) const {
    size_t j = open + 1;
    while (j < close) {
      size_t item_end = j;
      int depth = 0;
      for (; item_end < close; ++item_end) {
        if (is(item_end, "(") || is(item_end, "[")) {
          item_end = partner(item_end);
          continue;
        }
        if (is(item_end, "<")) ++depth;
        if (is(item_end, ">")) --depth;
        if (is(item_end, ">>")) depth -= 2;
        if (depth == 0 && is(item_end, ",")) break;
        if (depth == 0 && is(item_end, "=")) break;
      }
      // The name is the last identifier before `=` / `,` at depth 0.
      std::string name;
      bool pack = false;
      for (size_t k = j; k < item_end; ++k) {
        if (is(k, "<")) {
          const size_t m = match_angle(k, item_end + 1);
          if (m == SIZE_MAX) return false;
          k = m;
          continue;
        }
        if (is(k, "...")) pack = true;
        if (is_identifier(k)) name = spell(k);
      }
      if (name.empty() || name == "typename" || name == "class") return false;
      names->push_back(pack ? name + "..." : name);
      while (item_end < close && !is(item_end, ",")) ++item_end;  // skip a default
      j = item_end + 1;
    }
    return true;
  }

  bool parse_parameters(size_t open, std::vector<Parameter>* parameters, int line) {
    const size_t close = partner(open);
    size_t j = open + 1;
    while (j < close) {
      Parameter parameter;
      std::vector<size_t> declaration;  // tokens of the declaration without attributes
      int angle = 0;
      for (; j < close; ++j) {
        if (opens_attribute(j)) {
          j = parse_attribute(j, &parameter.attributes);
          continue;
        }
        if ((is(j, "(") || is(j, "[")) && partner(j) != SIZE_MAX) {
          for (size_t k = j; k <= partner(j); ++k) declaration.push_back(k);
          j = partner(j);
          continue;
        }
        if (is(j, "<")) ++angle;
        if (is(j, ">")) --angle;
        if (is(j, ">>")) angle -= 2;
        if (angle <= 0 && is(j, ",")) break;
        declaration.push_back(j);
      }
      ++j;
      // Drop a default argument.
      for (size_t k = 0; k < declaration.size(); ++k) {
        if (is(declaration[k], "=")) {
          declaration.resize(k);
          break;
        }
      }
      if (declaration.empty() || (declaration.size() == 1 && is(declaration[0], "void"))) continue;
      // Array suffix: `constant int64_t strides[2]` binds like a pointer.
      size_t type_end = declaration.size();
      while (type_end > 0 && is(declaration[type_end - 1], "]")) {
        const size_t open_bracket = partner(declaration[type_end - 1]);
        while (type_end > 0 && declaration[type_end - 1] != open_bracket) --type_end;
        --type_end;
        parameter.is_array = true;
      }
      if (type_end >= 2 && is_identifier(declaration[type_end - 1]) && !is(declaration[type_end - 2], "::")) {
        parameter.name = spell(declaration[type_end - 1]);
        --type_end;
      }
      for (size_t k = 0; k < type_end; ++k) {
        const size_t t = declaration[k];
        if (is(t, "*")) parameter.is_pointer = true;
        if (is(t, "&") || is(t, "&&")) parameter.is_reference = true;
        const bool before_declarator = !parameter.is_pointer && !parameter.is_reference;
        if (before_declarator && (is(t, "constant") || is(t, "const"))) parameter.read_only = true;
        if (is(t, "constant")) {
          parameter.type += declaration_has_const(t) ? "" : "const ";
          continue;
        }
        parameter.type += spell(t) + " ";
      }
      if (parameter.type.empty()) {
        fail(line, "cannot parse a kernel parameter");
        return false;
      }
      parameters->push_back(std::move(parameter));
    }
    return true;
  }

  bool bind_arguments(const std::vector<Parameter>& parameters, TranslatedKernel* k, int line) {
    std::set<uint32_t> used;
    for (const Parameter& p : parameters) {
      for (const AttributeItem& a : p.attributes) {
        if (a.name == "buffer" && !a.arguments.empty()) used.insert(attribute_integer(a.arguments[0]));
      }
    }
    uint32_t next_positional = 0;
    for (const Parameter& p : parameters) {
      KernelArgument argument;
      argument.name = p.name;
      const std::string label = "kernel '" + k->name + "' parameter '" + p.name + "'";
      const AttributeItem* binding = nullptr;
      for (const AttributeItem& a : p.attributes) {
        if (a.name == "buffer" || a.name == "threadgroup" || find_thread_attribute(a.name)) {
          binding = &a;
        } else if (a.name == "texture" || a.name == "sampler" || a.name == "stage_in" ||
                   a.name == "function_constant" || a.name == "visible_function_table" ||
                   a.name == "intersection_function_table" || a.name == "instance_acceleration_structure" ||
                   a.name == "primitive_acceleration_structure" || a.name == "grid_origin" ||
                   a.name == "grid_size") {
          fail(line, label + ": [[" + a.name + "]] is not supported by the CPU device");
          return false;
        }
      }
      if (binding && (binding->name == "buffer" || binding->name == "threadgroup")) {
        if (binding->arguments.size() != 1 || !std::isdigit(static_cast<unsigned char>(binding->arguments[0][0]))) {
          fail(line, label + ": [[" + binding->name + "(n)]] needs an integer literal");
          return false;
        }
        argument.index = attribute_integer(binding->arguments[0]);
        argument.kind = binding->name == "buffer" ? KernelArgumentKind::buffer : KernelArgumentKind::threadgroup_memory;
        argument.writable = !p.read_only;
        if (argument.index >= 31) {
          fail(line, label + ": " + binding->name + " index " + binding->arguments[0] +
                         " is out of range (0..30)");
          return false;
        }
        if (!p.is_pointer && !p.is_reference && !p.is_array) {
          fail(line, label + ": a [[" + binding->name + "]] parameter must be a pointer or reference");
          return false;
        }
      } else if (binding) {
        argument.kind = KernelArgumentKind::thread_attribute;
        argument.attribute = binding->name;
      } else if (p.is_pointer || p.is_reference || p.is_array) {
        while (used.count(next_positional)) ++next_positional;
        argument.index = next_positional;
        used.insert(next_positional);
        argument.kind = KernelArgumentKind::buffer;
      } else {
        fail(line, label + " has no [[buffer(n)]] or thread attribute and is not a pointer or reference");
        return false;
      }
      argument.by_reference = argument.kind == KernelArgumentKind::buffer && p.is_reference && !p.is_pointer;
      k->arguments.push_back(argument);
    }
    return true;
  }

  // The expression that initializes a thread-attribute parameter of type `type`.
  bool attribute_value(const Parameter& p, const ThreadAttribute& a, int line, std::string* out) {
    // The scalar type and width from the spelled type: uint, ushort2, metal::uint3 ...
    std::string base;
    for (size_t k = 0; k < p.type.size();) {
      const size_t b = k;
      while (k < p.type.size() && is_identifier_char(p.type[k])) ++k;
      if (k > b) {
        const std::string word = p.type.substr(b, k - b);
        if (word != "const" && word != "thread" && word != "metal" && word != "volatile") base = word;
      } else {
        ++k;
      }
    }
    int width = 1;
    std::string scalar = base;
    if (!base.empty() && base.back() >= '2' && base.back() <= '4') {
      width = base.back() - '0';
      scalar = base.substr(0, base.size() - 1);
    }
    static const std::set<std::string> kScalars = {"uint", "ushort", "int", "short", "uint32_t", "uint16_t", "ulong", "long", "size_t"};
    if (!kScalars.count(scalar) || p.is_pointer || p.is_reference) {
      fail(line, "parameter '" + p.name + "' [[" + a.name + "]] has unsupported type '" + p.type + "'");
      return false;
    }
    std::string value = base + "(";
    for (int c = 0; c < width; ++c) {
      value += (c ? ", " : "") + std::string("static_cast<") + scalar + ">(" + a.components[c] + ")";
    }
    *out = value + ")";
    return true;
  }

  bool wrapper_code(const std::string& kernel_name, const std::string& template_header,
                    const std::string& wrapper_name, const std::string& call_target,
                    const std::vector<Parameter>& parameters, int line, std::string* out) {
    TranslatedKernel probe;
    probe.name = kernel_name;
    if (!bind_arguments(parameters, &probe, line)) return false;
    std::string bindings, arguments, sizes;
    for (size_t k = 0; k < parameters.size(); ++k) {
      const Parameter& p = parameters[k];
      const KernelArgument& a = probe.arguments[k];
      const std::string local = "etm__argument" + std::to_string(k);
      std::string type = p.type;
      if (p.is_array) type += "*";
      switch (a.kind) {
        case KernelArgumentKind::buffer:
          if (a.by_reference) {
            bindings += type + " " + local + " = etm_cpu_kernel::bind_reference<" + type +
                        ">(etm__launch->buffers[" + std::to_string(a.index) + "]); ";
            sizes += "etm__sizes[" + std::to_string(k) + "] = etm_cpu_kernel::referenced_size<" + type + ">(); ";
          } else {
            bindings += type + " " + local + " = etm_cpu_kernel::bind_pointer<" + type +
                        ">(etm__launch->buffers[" + std::to_string(a.index) + "]); ";
          }
          arguments += (k ? ", " : "") + local;
          break;
        case KernelArgumentKind::threadgroup_memory:
          bindings += type + " " + local + " = etm_cpu_kernel::bind_pointer<" + type +
                      ">(etm__group->arena + etm__launch->dynamic_threadgroup_offsets[" +
                      std::to_string(a.index) + "]); ";
          arguments += (k ? ", " : "") + local;
          break;
        case KernelArgumentKind::thread_attribute: {
          std::string value;
          if (!attribute_value(p, *find_thread_attribute(a.attribute), line, &value)) return false;
          arguments += (k ? ", " : "") + value;
          break;
        }
      }
    }
    const std::string call = call_target + "(" + arguments + ");";
    std::ostringstream code;
    code << "#line " << line << "\n"
         << template_header << "struct " << wrapper_name << " { "
         << "static inline void etm__loop(const etm_cpu_launch* etm__launch, const etm_cpu_group* etm__group) { "
         << "etm_cpu_kernel::enter_group(etm__launch, etm__group); " << bindings
         << "const uint32_t etm__sx = etm__group->size[0], etm__sy = etm__group->size[1], etm__sz = etm__group->size[2]; "
         << "for (uint32_t etm__z = 0; etm__z < etm__sz; ++etm__z) "
         << "for (uint32_t etm__y = 0; etm__y < etm__sy; ++etm__y) { "
         << "const uint32_t etm__row = etm__sx * (etm__y + etm__sy * etm__z); "
         << "_Pragma(\"GCC ivdep\") for (uint32_t etm__x = 0; etm__x < etm__sx; ++etm__x) { "
         << "const uint32_t etm__index = etm__row + etm__x; (void)etm__index; " << call << " } } } "
         << "static inline void etm__thread(const etm_cpu_launch* etm__launch, const etm_cpu_group* etm__group, uint32_t etm__index) { "
         << "etm_cpu_kernel::enter_group(etm__launch, etm__group); " << bindings
         << "const uint32_t etm__sx = etm__group->size[0], etm__sy = etm__group->size[1]; "
         << "uint32_t etm__x = etm__index, etm__y = 0, etm__z = 0; "
         << "if (etm__sx != etm__group->thread_count) { etm__x = etm__index % etm__sx; "
         << "etm__y = (etm__index / etm__sx) % etm__sy; etm__z = etm__index / (etm__sx * etm__sy); } "
         << "(void)etm__x; (void)etm__y; (void)etm__z; " << call << " } "
         << "static inline void etm__argument_sizes(uint64_t* etm__sizes) { (void)etm__sizes; " << sizes << "} "
         << "};";
    *out = code.str();
    return true;
  }

  static std::string entry_code(uint32_t index, const std::string& target, int line) {
    const std::string n = std::to_string(index);
    std::ostringstream code;
    code << "\n#if ETM_CPU_KERNEL_SELECTED(" << n << ")\n#line " << line << "\n"
         << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_loop_" << n
         << "(const etm_cpu_launch* l, const etm_cpu_group* g) { " << target << "::etm__loop(l, g); } "
         << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_thread_" << n
         << "(const etm_cpu_launch* l, const etm_cpu_group* g, uint32_t i) { " << target << "::etm__thread(l, g, i); } "
         << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_argument_sizes_" << n
         << "(uint64_t* s) { " << target << "::etm__argument_sizes(s); }\n#endif";
    return code.str();
  }

  // `threadgroup T a[N], b;` statements inside function bodies become references to the
  // group's arena; `threadgroup T* p` (a pointer to threadgroup memory) stays as it is.
  void rewrite_threadgroup_declarations(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!is(i, "threadgroup")) continue;
      const bool statement_start = i == begin || is(i - 1, "{") || is(i - 1, "}") ||
                                   is(i - 1, ";") || is(i - 1, ":") || is_directive(i - 1);
      if (!statement_start) continue;
      size_t semicolon = i + 1;
      while (semicolon < end && !is(semicolon, ";") && !is(semicolon, "{") && !is(semicolon, "}")) {
        if ((is(semicolon, "(") || is(semicolon, "[")) && partner(semicolon) != SIZE_MAX) semicolon = partner(semicolon);
        ++semicolon;
      }
      if (!is(semicolon, ";")) continue;
      // Split declarators at top-level commas (angle brackets count as nesting).
      std::vector<std::pair<size_t, size_t>> parts;
      size_t part_begin = i + 1;
      int angle = 0;
      for (size_t j = i + 1; j <= semicolon; ++j) {
        if ((is(j, "(") || is(j, "[")) && partner(j) != SIZE_MAX) {
          j = partner(j);
          continue;
        }
        if (is(j, "<")) ++angle;
        if (is(j, ">")) --angle;
        if (is(j, ">>")) angle -= 2;
        if ((angle <= 0 && is(j, ",")) || j == semicolon) {
          parts.push_back({part_begin, j});
          part_begin = j + 1;
        }
      }
      // First declarator: type, then name, then array dimensions.
      const auto [first_begin, first_end] = parts[0];
      size_t name = first_end;
      size_t dims = first_end;
      while (dims > first_begin && is(dims - 1, "]")) dims = partner(dims - 1);
      name = dims - 1;
      if (name <= first_begin || !is_identifier(name)) continue;
      bool pointer = false;
      std::string type;
      for (size_t k = first_begin; k < name; ++k) {
        if (is(k, "*") || is(k, "&") || is(k, "&&")) pointer = true;
        if (is(k, "constant")) continue;
        type += spell(k) + " ";
      }
      if (pointer || type.empty()) continue;
      bool ok = true;
      std::string code;
      for (size_t d = 0; d < parts.size() && ok; ++d) {
        size_t declarator_begin = d == 0 ? name : parts[d].first;
        const size_t declarator_end = parts[d].second;
        if (!is_identifier(declarator_begin)) {
          ok = false;
          break;
        }
        std::string dimensions;
        for (size_t k = declarator_begin + 1; k < declarator_end; ++k) {
          if (!is(k, "[") && dimensions.empty()) {
            ok = false;  // an initializer or a pointer declarator
            break;
          }
          dimensions += spell(k);
        }
        code += "auto& " + spell(declarator_begin) + " = etm_cpu_kernel::threadgroup_variable<" + type +
                dimensions + ", " + std::to_string(next_threadgroup_site_++) + "u>(); ";
      }
      if (!ok) continue;
      const size_t b = tokens_[i].begin, e = tokens_[semicolon].end;
      code.append(static_cast<size_t>(std::count(text_.begin() + b, text_.begin() + e, '\n')), '\n');
      edits_.push_back({b, e, code});
      i = semicolon;
    }
  }

  const std::string& text_;
  MslTranslationOptions options_;
  std::vector<Token> tokens_;
  std::vector<size_t> partner_;
  std::vector<Edit> edits_;
  std::vector<TranslatedKernel> kernels_;
  std::vector<KernelTemplate> templates_;
  std::set<std::string> declared_kernels_;
  unsigned next_threadgroup_site_ = 0;
  std::string error_;
};

}  // namespace

Status translate_msl(const std::string& msl, const MslTranslationOptions& options,
                     MslTranslation* out) {
  std::vector<Token> tokens;
  std::string error;
  if (!Lexer(msl).run(&tokens, &error)) return Status::error(std::string(kMslSourceName) + ":" + error);
  const std::string expanded = expand_kernel_macros(msl, tokens);
  return Translator(expanded, options).run(out);
}

}  // namespace etm::device::cpu
