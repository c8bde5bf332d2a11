#include "device/cpu/msl_preprocessor.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "device/cpu/embedded_headers.h"
#include "device/cpu/msl_translator.h"

namespace etm::device::cpu {
namespace {

// ------------------------------------------------------------------------------ macros
//
// Macros are expanded with the C preprocessor's rules (argument pre-expansion, #, ##,
// __VA_ARGS__, no recursion): in #if conditions, and where an invocation of the source's
// own macros produces kernel syntax, which the translator must see. Each such expansion
// stays on the line of its invocation, and the newlines it consumed follow it. Other
// macros are left to the compiler.

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
  lex_msl(text, &tokens, &error);
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

// ------------------------------------------------------------------ #if expressions

// A value of a preprocessor expression: intmax_t or uintmax_t, as C says.
struct PpValue {
  uint64_t bits = 0;
  bool is_unsigned = false;
  int64_t as_signed() const { return static_cast<int64_t>(bits); }
  bool truth() const { return bits != 0; }
};

enum class Decision { no, yes, undecided };

// Evaluates the tokens of a condition whose `defined` operators and macros are already
// replaced. Identifiers left are 0, unless `unknown_identifier` says the compiler may know
// them (then the condition is undecided).
class ExpressionParser {
 public:
  ExpressionParser(const std::vector<MacroToken>& tokens) : tokens_(tokens) {}

  // Returns false with `error` on a malformed expression.
  bool evaluate(PpValue* out, std::string* error) {
    *out = comma();
    if (error_.empty() && position_ != tokens_.size()) error_ = "unexpected '" + tokens_[position_].text + "'";
    *error = error_;
    return error_.empty();
  }

 private:
  const std::string& peek() const {
    static const std::string end;
    return position_ < tokens_.size() ? tokens_[position_].text : end;
  }
  bool accept(const char* op) {
    if (peek() != op) return false;
    ++position_;
    return true;
  }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }

  PpValue comma() {
    PpValue v = conditional();
    while (error_.empty() && accept(",")) v = conditional();
    return v;
  }
  PpValue conditional() {
    const PpValue c = logical_or();
    if (!accept("?")) return c;
    const PpValue a = comma();
    if (!accept(":")) fail("expected ':' in a conditional expression");
    const PpValue b = conditional();
    PpValue r = c.truth() ? a : b;
    r.is_unsigned = a.is_unsigned || b.is_unsigned;
    return r;
  }
  PpValue logical_or() {
    PpValue v = logical_and();
    while (accept("||")) {
      const PpValue r = logical_and();
      v = {v.truth() || r.truth() ? 1u : 0u, false};
    }
    return v;
  }
  PpValue logical_and() {
    PpValue v = binary(0);
    while (accept("&&")) {
      const PpValue r = binary(0);
      v = {v.truth() && r.truth() ? 1u : 0u, false};
    }
    return v;
  }

  // Binary operators from | (level 0) to * / % (level 7), left-associative.
  PpValue binary(int level) {
    static const std::vector<std::vector<std::string>> kLevels = {
        {"|"}, {"^"}, {"&"}, {"==", "!="}, {"<", ">", "<=", ">="}, {"<<", ">>"}, {"+", "-"}, {"*", "/", "%"}};
    if (level == static_cast<int>(kLevels.size())) return unary();
    PpValue v = binary(level + 1);
    for (;;) {
      const std::string op = peek();
      const auto& ops = kLevels[level];
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) return v;
      ++position_;
      v = apply(op, v, binary(level + 1));
    }
  }

  PpValue apply(const std::string& op, PpValue a, PpValue b) {
    const bool u = a.is_unsigned || b.is_unsigned;
    auto boolean = [](bool x) { return PpValue{x ? 1u : 0u, false}; };
    if (op == "==") return boolean(a.bits == b.bits);
    if (op == "!=") return boolean(a.bits != b.bits);
    if (op == "<") return boolean(u ? a.bits < b.bits : a.as_signed() < b.as_signed());
    if (op == ">") return boolean(u ? a.bits > b.bits : a.as_signed() > b.as_signed());
    if (op == "<=") return boolean(u ? a.bits <= b.bits : a.as_signed() <= b.as_signed());
    if (op == ">=") return boolean(u ? a.bits >= b.bits : a.as_signed() >= b.as_signed());
    if (op == "<<" || op == ">>") {
      if (b.as_signed() < 0 || b.as_signed() >= 64) {
        fail("shift count out of range in #if");
        return {};
      }
      const unsigned n = static_cast<unsigned>(b.bits);
      if (op == "<<") return {a.bits << n, a.is_unsigned};
      return {a.is_unsigned ? a.bits >> n : static_cast<uint64_t>(a.as_signed() >> n), a.is_unsigned};
    }
    if ((op == "/" || op == "%") && b.bits == 0) {
      fail("division by zero in #if");
      return {};
    }
    if ((op == "/" || op == "%") && !u && a.as_signed() == INT64_MIN && b.as_signed() == -1) {
      fail("integer overflow in #if");
      return {};
    }
    PpValue r{0, u};
    if (op == "+") r.bits = a.bits + b.bits;
    if (op == "-") r.bits = a.bits - b.bits;
    if (op == "*") r.bits = a.bits * b.bits;
    if (op == "&") r.bits = a.bits & b.bits;
    if (op == "|") r.bits = a.bits | b.bits;
    if (op == "^") r.bits = a.bits ^ b.bits;
    if (op == "/") r.bits = u ? a.bits / b.bits : static_cast<uint64_t>(a.as_signed() / b.as_signed());
    if (op == "%") r.bits = u ? a.bits % b.bits : static_cast<uint64_t>(a.as_signed() % b.as_signed());
    return r;
  }

  // Nesting beyond this is refused rather than recursed into (the host stack is finite).
  static constexpr int kMaxNesting = 256;

  PpValue unary() {
    if (++nesting_ > kMaxNesting) {
      fail("the #if expression nests deeper than " + std::to_string(kMaxNesting));
      position_ = tokens_.size();
      return {};
    }
    const PpValue v = unary_operand();
    --nesting_;
    return v;
  }

  PpValue unary_operand() {
    if (accept("+")) return unary();
    if (accept("-")) {
      PpValue v = unary();
      v.bits = 0 - v.bits;
      return v;
    }
    if (accept("~")) {
      PpValue v = unary();
      v.bits = ~v.bits;
      return v;
    }
    if (accept("!")) return {unary().truth() ? 0u : 1u, false};
    return primary();
  }

  PpValue primary() {
    if (accept("(")) {
      const PpValue v = comma();
      if (!accept(")")) fail("expected ')' in #if");
      return v;
    }
    if (position_ >= tokens_.size()) {
      fail("the #if expression ends early");
      return {};
    }
    const std::string text = tokens_[position_++].text;
    if (!text.empty() && text[0] == '\'') return character(text);
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) {
      fail("'" + text + "' is not valid in #if");
      return {};
    }
    return number(text);
  }

  PpValue number(const std::string& text) {
    std::string digits;
    for (char c : text) {
      if (c != '\'') digits += c;
    }
    size_t suffix = digits.size();
    while (suffix > 0 && (std::tolower(static_cast<unsigned char>(digits[suffix - 1])) == 'u' ||
                          std::tolower(static_cast<unsigned char>(digits[suffix - 1])) == 'l')) {
      --suffix;
    }
    const std::string suffix_text = digits.substr(suffix);
    digits.resize(suffix);
    int base = 10;
    size_t start = 0;
    if (digits.size() > 1 && digits[0] == '0') {
      const char marker = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[1])));
      if (marker == 'x') base = 16, start = 2;
      else if (marker == 'b') base = 2, start = 2;
      else base = 8, start = 1;
    }
    PpValue v;
    v.is_unsigned = suffix_text.find_first_of("uU") != std::string::npos;
    if (start >= digits.size() && base != 8) {
      fail("invalid integer '" + text + "' in #if");
      return {};
    }
    for (size_t k = start; k < digits.size(); ++k) {
      const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[k])));
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99);
      if (d >= base) {
        fail("invalid integer '" + text + "' in #if");
        return {};
      }
      v.bits = v.bits * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    }
    if (v.bits > static_cast<uint64_t>(INT64_MAX)) v.is_unsigned = true;
    return v;
  }

  PpValue character(const std::string& text) {
    if (text.size() == 3) return {static_cast<uint64_t>(static_cast<unsigned char>(text[1])), false};
    static const std::map<char, char> kEscapes = {{'n', '\n'}, {'t', '\t'}, {'r', '\r'}, {'0', '\0'},
                                                  {'\\', '\\'}, {'\'', '\''}, {'"', '"'}};
    if (text.size() == 4 && text[1] == '\\' && kEscapes.count(text[2])) {
      return {static_cast<uint64_t>(static_cast<unsigned char>(kEscapes.at(text[2]))), false};
    }
    fail("unsupported character literal " + text + " in #if");
    return {};
  }

  const std::vector<MacroToken>& tokens_;
  size_t position_ = 0;
  int nesting_ = 0;
  std::string error_;
};

// The names the emulated <metal_*> headers #define (every translation unit includes them).
const std::set<std::string>& library_macro_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> found;
    for (size_t i = 0; i < kEmbeddedKernelHeaders_count; ++i) {
      const EmbeddedFile& file = kEmbeddedKernelHeaders[i];
      if (std::string(file.path).rfind("metal_include/", 0) != 0) continue;
      std::istringstream lines(std::string(file.contents, file.size));
      for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        std::string hash, keyword, name;
        words >> hash;
        if (hash == "#") words >> keyword;
        else if (hash.size() > 1 && hash[0] == '#') keyword = hash.substr(1);
        if (keyword != "define" || !(words >> name)) continue;
        name = name.substr(0, name.find('('));
        if (!name.empty()) found.insert(name);
      }
    }
    return found;
  }();
  return names;
}

// ----------------------------------------------------------------------- the stage

// A directive's keyword and the text after it (continuations joined, comments dropped).
struct DirectiveText {
  std::string keyword;
  std::vector<MacroToken> operands;
};

DirectiveText split_directive(const std::string& text) {
  std::string joined;
  for (size_t i = text.find('#') + 1; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      joined += ' ';
      ++i;
      continue;
    }
    joined += text[i];
  }
  DirectiveText d;
  std::vector<MacroToken> tokens = lex_fragment(joined);
  if (tokens.empty()) return d;
  d.keyword = tokens[0].text;
  d.operands.assign(tokens.begin() + 1, tokens.end());
  return d;
}

bool opens_group(const std::string& keyword) {
  return keyword == "if" || keyword == "ifdef" || keyword == "ifndef";
}
bool continues_group(const std::string& keyword) {
  return keyword == "elif" || keyword == "elifdef" || keyword == "elifndef" || keyword == "else";
}

class Preprocessor {
 public:
  Preprocessor(const std::string& text, const std::vector<Token>& tokens, int metal_version)
      : text_(text), tokens_(tokens) {
    for (const auto& [name, value] : predefined_metal_macros(metal_version)) {
      Macro m;
      m.body = lex_fragment(value);
      macros_[name] = m;
    }
  }

  Status run(std::string* out, std::vector<Token>* out_tokens) {
    if (!match_groups()) return Status::error(error_);
    process(0, tokens_.size());
    if (!error_.empty()) return Status::error(error_);
    std::sort(edits_.begin(), edits_.end(), [](const TextEdit& a, const TextEdit& b) { return a.begin < b.begin; });
    std::string error;
    if (!apply_edits(text_, tokens_, edits_, out, out_tokens, &error)) {
      return Status::error(std::string(kMslSourceName) + ":" + error);
    }
    return Status();
  }

 private:
  struct Group {
    std::vector<size_t> branches;  // the #if/#ifdef/#ifndef directive, then #elif... #else
    size_t endif = 0;
  };

  void fail(int line, const std::string& message) {
    if (error_.empty()) error_ = std::string(kMslSourceName) + ":" + std::to_string(line) + ": " + message;
  }
  std::string spell(size_t i) const { return text_.substr(tokens_[i].begin, tokens_[i].end - tokens_[i].begin); }
  size_t newlines(size_t begin, size_t end) const {
    return static_cast<size_t>(std::count(text_.begin() + begin, text_.begin() + end, '\n'));
  }
  // Replaces text with its line breaks only.
  void blank(size_t begin, size_t end) {
    if (end > begin) edits_.push_back({begin, end, std::string(newlines(begin, end), '\n')});
  }

  // Pairs every conditional directive with its group.
  bool match_groups() {
    std::vector<size_t> open;
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (tokens_[i].kind != TokenKind::directive) continue;
      keywords_[i] = split_directive(spell(i)).keyword;
      const std::string& keyword = keywords_[i];
      if (opens_group(keyword)) {
        open.push_back(i);
        groups_[i].branches.push_back(i);
      } else if (continues_group(keyword) || keyword == "endif") {
        if (open.empty()) {
          fail(tokens_[i].line, "#" + keyword + " without #if");
          return false;
        }
        Group& group = groups_[open.back()];
        if (keywords_[group.branches.back()] == "else" && keyword != "endif") {
          fail(tokens_[i].line, "#" + keyword + " after #else");
          return false;
        }
        if (keyword == "endif") {
          group.endif = i;
          open.pop_back();
        } else {
          group.branches.push_back(i);
        }
      }
    }
    if (!open.empty()) {
      fail(tokens_[open.back()].line, "unterminated #" + keywords_[open.back()]);
      return false;
    }
    return true;
  }

  // Walks the live tokens [begin, end).
  void process(size_t begin, size_t end) {
    for (size_t i = begin; i < end && error_.empty(); ++i) {
      const Token& t = tokens_[i];
      if (t.kind == TokenKind::directive) {
        i = directive(i);
        continue;
      }
      if (t.kind == TokenKind::identifier) i = expand_invocation(i, end);
    }
  }

  // Handles the directive at i; returns the last token it consumed.
  size_t directive(size_t i) {
    const std::string& keyword = keywords_[i];
    if (opens_group(keyword)) return conditional(i);
    const DirectiveText d = split_directive(spell(i));
    if (keyword == "define") {
      Macro macro;
      const std::string name = parse_define(spell(i), &macro);
      if (!name.empty()) macros_[name] = macro;
    } else if (keyword == "undef") {
      if (!d.operands.empty()) macros_.erase(d.operands[0].text);
    } else if (keyword == "include" || keyword == "include_next" || keyword == "import") {
      const bool metal_header = d.operands.size() >= 2 && d.operands[0].text == "<" &&
                                d.operands[1].text.rfind("metal_", 0) == 0;
      if (!metal_header) foreign_include_ = true;
      // Apple's tensor-operation framework (MSL 4, M5 GPUs) has no CPU emulation.
      if (d.operands.size() >= 2 && d.operands[0].text == "<" && d.operands[1].text == "MetalPerformancePrimitives") {
        fail(tokens_[i].line, "MetalPerformancePrimitives is not supported by the CPU device");
      }
    } else if (keyword == "error") {
      std::string message;
      for (const MacroToken& o : d.operands) message += (message.empty() ? "" : " ") + o.text;
      fail(tokens_[i].line, "#error " + message);
    }
    return i;
  }

  // Decides the group opened at i; returns its #endif.
  size_t conditional(size_t i) {
    const Group& group = groups_.at(i);
    std::optional<size_t> live;  // index into branches; none: every branch is dead
    bool decided = true;
    for (size_t b = 0; b < group.branches.size() && !live; ++b) {
      const Decision d = condition(group.branches[b]);
      if (!error_.empty()) return group.endif;
      if (d == Decision::undecided) {
        decided = false;
        break;
      }
      if (d == Decision::yes) live = b;
    }
    for (size_t b = 0; b < group.branches.size(); ++b) {
      const size_t directive_token = group.branches[b];
      const size_t next = b + 1 < group.branches.size() ? group.branches[b + 1] : group.endif;
      if (!decided || live == b) {
        process(directive_token + 1, next);
      } else {
        blank(tokens_[directive_token].end, tokens_[next].begin);
      }
      if (decided) blank(tokens_[directive_token].begin, tokens_[directive_token].end);
    }
    if (decided) blank(tokens_[group.endif].begin, tokens_[group.endif].end);
    return group.endif;
  }

  Decision defined(const std::string& name) const {
    if (macros_.count(name) || library_macro_names().count(name)) return Decision::yes;
    return foreign_include_ || compiler_reserved(name) ? Decision::undecided : Decision::no;
  }

  // A reserved name Apple's compiler may predefine that is not Metal's own (__cplusplus,
  // __cpp_variable_templates ...): the host compiler decides it. Metal's own (__METAL*,
  // __HAVE_*) are decided here, from predefined_metal_macros.
  static bool compiler_reserved(const std::string& name) {
    return name.rfind("__", 0) == 0 && name.rfind("__METAL", 0) != 0 && name.rfind("__HAVE_", 0) != 0;
  }

  Decision condition(size_t i) {
    const DirectiveText d = split_directive(spell(i));
    const int line = tokens_[i].line;
    if (d.keyword == "else") return Decision::yes;
    if (d.keyword == "ifdef" || d.keyword == "ifndef" || d.keyword == "elifdef" || d.keyword == "elifndef") {
      if (d.operands.size() != 1 || !d.operands[0].identifier) {
        fail(line, "#" + d.keyword + " needs one macro name");
        return Decision::no;
      }
      const Decision found = defined(d.operands[0].text);
      if (found == Decision::undecided || d.keyword == "ifdef" || d.keyword == "elifdef") return found;
      return found == Decision::yes ? Decision::no : Decision::yes;
    }
    if (d.operands.empty()) {
      fail(line, "#" + d.keyword + " needs a condition");
      return Decision::no;
    }
    bool undecided = false;
    std::vector<MacroToken> resolved = resolve_defined(d.operands, &undecided);
    MacroExpander expander(macros_);
    resolved = resolve_defined(expander.expand(resolved, {}), &undecided);
    for (MacroToken& t : resolved) {
      if (!t.identifier) continue;
      static const std::set<std::string> kCompilerQueries = {
          "__has_include", "__has_include_next", "__has_feature", "__has_extension",
          "__has_attribute", "__has_cpp_attribute", "__has_builtin", "__is_identifier"};
      if (kCompilerQueries.count(t.text) || library_macro_names().count(t.text) || foreign_include_ ||
          compiler_reserved(t.text)) {
        undecided = true;
      }
      t = {t.text == "true" ? "1" : "0", false};
    }
    if (undecided) return Decision::undecided;
    PpValue value;
    std::string error;
    if (!ExpressionParser(resolved).evaluate(&value, &error)) {
      fail(line, "#" + d.keyword + ": " + error);
      return Decision::no;
    }
    return value.truth() ? Decision::yes : Decision::no;
  }

  // `defined X` and `defined(X)` become 1 or 0.
  std::vector<MacroToken> resolve_defined(const std::vector<MacroToken>& tokens, bool* undecided) const {
    std::vector<MacroToken> out;
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (tokens[k].text != "defined") {
        out.push_back(tokens[k]);
        continue;
      }
      std::string name;
      if (k + 1 < tokens.size() && tokens[k + 1].identifier) {
        name = tokens[++k].text;
      } else if (k + 3 < tokens.size() && tokens[k + 1].text == "(" && tokens[k + 2].identifier &&
                 tokens[k + 3].text == ")") {
        name = tokens[k + 2].text;
        k += 3;
      } else {
        out.push_back({"defined", true});  // malformed: the parser reports it
        continue;
      }
      const Decision d = defined(name);
      if (d == Decision::undecided) *undecided = true;
      out.push_back({d == Decision::yes ? "1" : "0", false});
    }
    return out;
  }

  // Expands the invocation at i when it produces kernel syntax; returns its last token.
  size_t expand_invocation(size_t i, size_t end) {
    const std::string name = spell(i);
    auto found = macros_.find(name);
    if (found == macros_.end()) return i;
    MacroExpander expander(macros_);
    if (!expander.is_relevant(name)) return i;
    // Gather the invocation's tokens (stopping at a directive, which cannot be inside).
    size_t last = i;
    if (found->second.function_like) {
      if (i + 1 >= end || text_.compare(tokens_[i + 1].begin, 1, "(") != 0) return i;
      int depth = 0;
      size_t j = i + 1;
      for (; j < end && tokens_[j].kind != TokenKind::directive; ++j) {
        const char c = text_[tokens_[j].begin];
        const bool single = tokens_[j].end - tokens_[j].begin == 1;
        if (single && c == '(') ++depth;
        if (single && c == ')' && --depth == 0) break;
      }
      if (j >= end || tokens_[j].kind == TokenKind::directive) return i;
      last = j;
    }
    std::vector<MacroToken> invocation;
    for (size_t k = i; k <= last; ++k) {
      invocation.push_back({spell(k), tokens_[k].kind == TokenKind::identifier});
    }
    std::string replacement;
    for (const MacroToken& e : expander.expand(invocation, {})) replacement += e.text + ' ';
    replacement.append(newlines(tokens_[i].begin, tokens_[last].end), '\n');
    edits_.push_back({tokens_[i].begin, tokens_[last].end, std::move(replacement)});
    return last;
  }

  const std::string& text_;
  const std::vector<Token>& tokens_;
  MacroTable macros_;
  std::map<size_t, std::string> keywords_;  // per directive token
  std::map<size_t, Group> groups_;          // by opening directive token
  bool foreign_include_ = false;
  std::vector<TextEdit> edits_;
  std::string error_;
};

}  // namespace

std::vector<std::pair<std::string, std::string>> predefined_metal_macros(int metal_version) {
  std::vector<std::pair<std::string, std::string>> macros = {
      {"__METAL__", "1"}, {"__METAL_VERSION__", std::to_string(metal_version)}, {"__METAL_MACOS__", "1"}};
  if (metal_version >= 310) macros.push_back({"__HAVE_BFLOAT__", "1"});
  return macros;
}

Status preprocess_msl(const std::string& source, const std::vector<Token>& tokens, int metal_version,
                      std::string* out, std::vector<Token>* out_tokens) {
  return Preprocessor(source, tokens, metal_version).run(out, out_tokens);
}

}  // namespace etm::device::cpu
