#include "device/cpu/msl_function_constants.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <map>

#include "device/cpu/msl_translator.h"

namespace etm::device::cpu {
namespace {

struct IntegerRange {
  int64_t low;
  uint64_t high;
};

// The scalar types a function constant may have on the CPU device.
const std::map<std::string, IntegerRange>& integer_types() {
  static const std::map<std::string, IntegerRange> types = {
      {"char", {INT8_MIN, INT8_MAX}},       {"int8_t", {INT8_MIN, INT8_MAX}},
      {"uchar", {0, UINT8_MAX}},            {"uint8_t", {0, UINT8_MAX}},
      {"short", {INT16_MIN, INT16_MAX}},    {"int16_t", {INT16_MIN, INT16_MAX}},
      {"ushort", {0, UINT16_MAX}},          {"uint16_t", {0, UINT16_MAX}},
      {"int", {INT32_MIN, INT32_MAX}},      {"int32_t", {INT32_MIN, INT32_MAX}},
      {"uint", {0, UINT32_MAX}},            {"uint32_t", {0, UINT32_MAX}},
      {"long", {INT64_MIN, INT64_MAX}},     {"int64_t", {INT64_MIN, INT64_MAX}},
      {"ulong", {0, UINT64_MAX}},           {"uint64_t", {0, UINT64_MAX}},
      {"size_t", {0, UINT64_MAX}},
  };
  return types;
}

bool is_floating_type(const std::string& type) {
  return type == "float" || type == "half" || type == "bfloat";
}

class Rewriter {
 public:
  Rewriter(const std::string& text, const std::vector<Token>& tokens) : text_(text), tokens_(tokens) {}

  Status run(std::string* out, std::vector<FunctionConstant>* constants, std::vector<Token>* out_tokens) {
    for (size_t i = 0; i + 4 < tokens_.size() && error_.empty(); ++i) {
      if (is(i, "[") && is(i + 1, "[") && is(i + 2, "function_constant") && is(i + 3, "(")) declaration(i);
    }
    for (size_t i = 0; i + 3 < tokens_.size() && error_.empty(); ++i) {
      if (is(i, "is_function_constant_defined")) query(i);
    }
    if (!error_.empty()) return Status::error(error_);
    std::sort(edits_.begin(), edits_.end(), [](const TextEdit& a, const TextEdit& b) { return a.begin < b.begin; });
    std::string error;
    if (!apply_edits(text_, tokens_, edits_, out, out_tokens, &error)) {
      return Status::error(std::string(kMslSourceName) + ":" + error);
    }
    *constants = std::move(constants_);
    return Status();
  }

 private:
  std::string spell(size_t i) const { return text_.substr(tokens_[i].begin, tokens_[i].end - tokens_[i].begin); }
  bool is(size_t i, const char* s) const {
    return i < tokens_.size() && tokens_[i].kind != TokenKind::directive && spell(i) == s;
  }
  void fail(size_t i, const std::string& message) {
    if (error_.empty()) {
      error_ = std::string(kMslSourceName) + ":" + std::to_string(tokens_[i].line) + ": " + message;
    }
  }
  std::string newlines(size_t first, size_t last) const {
    return std::string(std::count(text_.begin() + tokens_[first].begin, text_.begin() + tokens_[last].end, '\n'),
                       '\n');
  }

  // `constant T name [[function_constant(n)]];` whose attribute opens at `open`. Kernel
  // parameters with the attribute are left for the translator (which refuses them).
  void declaration(size_t open) {
    size_t start = open;
    int depth = 0;
    while (start > 0) {
      const size_t k = start - 1;
      if (tokens_[k].kind == TokenKind::directive || is(k, ";") || is(k, "{") || is(k, "}")) break;
      if (is(k, ")") || is(k, "]")) ++depth;
      if (is(k, "(") || is(k, "[")) {
        if (depth == 0) return;  // a parameter
        --depth;
      }
      if (is(k, ",") && depth == 0) return;
      start = k;
    }
    size_t close = open + 4;
    std::vector<std::string> arguments;
    while (close < tokens_.size() && !is(close, ")")) arguments.push_back(spell(close++));
    if (!is(close + 1, "]") || !is(close + 2, "]")) return fail(open, "malformed [[function_constant]] attribute");
    const size_t semicolon = close + 3;
    if (!is(semicolon, ";")) {
      return fail(open, "a [[function_constant]] declaration ends after the attribute (no initializer)");
    }
    if (arguments.size() != 1 || !std::isdigit(static_cast<unsigned char>(arguments[0][0]))) {
      return fail(open, "[[function_constant(n)]] needs an integer literal index");
    }
    const size_t name = open - 1;
    if (name <= start || tokens_[name].kind != TokenKind::identifier) {
      return fail(open, "cannot find the name of the function constant");
    }
    std::vector<std::string> words;
    for (size_t k = start; k < name; ++k) expand_specifier(spell(k), 0, &words);
    std::string type;
    bool constant_space = false;
    for (const std::string& word : words) {
      if (word == "constant") {
        constant_space = true;
      } else if (word != "const" && word != "constexpr" && word != "static" && word != "metal" && word != "::") {
        type += (type.empty() ? "" : " ") + word;
      }
    }
    if (!constant_space) return fail(open, "a function constant must be declared in the constant address space");
    if (type != "bool" && !integer_types().count(type) && !is_floating_type(type)) {
      return fail(open, "function constant '" + spell(name) + "' has type '" + type +
                            "'; the CPU device supports bool, integer, float, half and bfloat scalars");
    }
    FunctionConstant c{spell(name), static_cast<uint32_t>(std::stoul(arguments[0], nullptr, 0)), type};
    for (const FunctionConstant& other : constants_) {
      if (other.name == c.name) return fail(open, "function constant '" + c.name + "' is declared twice");
      if (other.index == c.index && other.type != c.type) {
        return fail(open, "function constant index " + arguments[0] + " is declared with two types");
      }
    }
    const std::string n = std::to_string(c.index);
    edits_.push_back({tokens_[start].begin, tokens_[semicolon].end,
                      "constexpr " + type + " " + c.name + " = static_cast<" + type + ">(ETM_FC_VALUE_" + n + ");" +
                          newlines(start, semicolon)});
    constants_.push_back(std::move(c));
  }

  // A specifier of the declaration, through the source's object-like macros
  // (`#define STEEL_CONST static constant constexpr const`).
  void expand_specifier(const std::string& word, int depth, std::vector<std::string>* words) {
    if (!macros_collected_) collect_object_macros();
    const auto found = object_macros_.find(word);
    if (found == object_macros_.end() || depth > 8) {
      words->push_back(word);
      return;
    }
    std::vector<Token> body;
    std::string error;
    if (!lex_msl(found->second, &body, &error)) return words->push_back(word);
    for (const Token& t : body) expand_specifier(found->second.substr(t.begin, t.end - t.begin), depth + 1, words);
  }

  void collect_object_macros() {
    macros_collected_ = true;
    for (const Token& t : tokens_) {
      if (t.kind != TokenKind::directive) continue;
      std::string d = text_.substr(t.begin, t.end - t.begin);
      size_t k = d.find_first_not_of(" \t", 1);
      if (k == std::string::npos || d.compare(k, 6, "define") != 0) continue;
      k = d.find_first_not_of(" \t", k + 6);
      if (k == std::string::npos || !is_identifier_start(d[k])) continue;
      size_t e = k;
      while (e < d.size() && is_identifier_char(d[e])) ++e;
      if (e < d.size() && d[e] == '(') continue;  // a function-like macro
      std::string body = d.substr(e);
      for (char& c : body) {
        if (c == '\\' || c == '\n' || c == '\r') c = ' ';
      }
      object_macros_[d.substr(k, e - k)] = body;
    }
  }

  void query(size_t i) {
    if (!is(i + 1, "(") || tokens_[i + 2].kind != TokenKind::identifier || !is(i + 3, ")")) {
      return fail(i, "is_function_constant_defined needs the name of a function constant");
    }
    const std::string name = spell(i + 2);
    size_t first = i;
    if (i >= 2 && is(i - 1, "::") && is(i - 2, "metal")) first = i - 2;
    for (const FunctionConstant& c : constants_) {
      if (c.name != name) continue;
      edits_.push_back({tokens_[first].begin, tokens_[i + 3].end,
                        "(ETM_FC_PRESENT_" + std::to_string(c.index) + " != 0)" + newlines(first, i + 3)});
      return;
    }
    fail(i, "'" + name + "' is not a function constant declared before this use");
  }

  const std::string& text_;
  const std::vector<Token>& tokens_;
  std::vector<FunctionConstant> constants_;
  std::vector<TextEdit> edits_;
  std::map<std::string, std::string> object_macros_;  // name -> replacement text
  bool macros_collected_ = false;
  std::string error_;
};

std::string value_literal(const FunctionConstant& c, const FunctionConstantValue& v, std::string* error) {
  using Kind = FunctionConstantValue::Kind;
  const std::string label = "function constant '" + c.name + "' (" + c.type + ")";
  if (c.type == "bool") {
    if (v.kind != Kind::boolean) {
      *error = label + " needs a boolean value";
      return "";
    }
    return v.integer ? "1" : "0";
  }
  if (is_floating_type(c.type)) {
    if (v.kind == Kind::boolean) {
      *error = label + " needs a number, not a boolean";
      return "";
    }
    const double value = v.kind == Kind::integer ? static_cast<double>(v.integer) : v.floating;
    if (value != value) return "__builtin_nan(\"\")";
    if (value == std::numeric_limits<double>::infinity()) return "__builtin_inf()";
    if (value == -std::numeric_limits<double>::infinity()) return "(-__builtin_inf())";
    char text[64];
    std::snprintf(text, sizeof text, "(%a)", value);
    return text;
  }
  const IntegerRange& range = integer_types().at(c.type);
  if (v.kind != Kind::integer) {
    *error = label + " needs an integer value";
    return "";
  }
  const bool fits = v.integer >= range.low && (v.integer < 0 || static_cast<uint64_t>(v.integer) <= range.high);
  if (!fits) {
    *error = label + " cannot hold " + std::to_string(v.integer);
    return "";
  }
  // INT64_MIN has no literal spelling.
  if (v.integer == INT64_MIN) return "(-9223372036854775807LL - 1)";
  return "(" + std::to_string(v.integer) + "LL)";
}

}  // namespace

Status rewrite_function_constants(const std::string& source, const std::vector<Token>& tokens,
                                  std::string* out, std::vector<FunctionConstant>* constants,
                                  std::vector<Token>* out_tokens) {
  return Rewriter(source, tokens).run(out, constants, out_tokens);
}

std::string function_constant_defaults(const std::vector<FunctionConstant>& constants) {
  std::string out;
  for (const FunctionConstant& c : constants) {
    const std::string n = std::to_string(c.index);
    out += "#ifndef ETM_FC_PRESENT_" + n + "\n#define ETM_FC_PRESENT_" + n + " 0\n#define ETM_FC_VALUE_" + n +
           " 0\n#endif\n";
  }
  return out;
}

Status function_constant_flags(const std::vector<FunctionConstant>& declared,
                               const std::vector<FunctionConstantValue>& values, std::vector<std::string>* flags) {
  std::map<uint32_t, std::string> literals;  // sorted, so equal sets give equal flags
  for (const FunctionConstantValue& v : values) {
    const FunctionConstant* target = nullptr;
    for (const FunctionConstant& c : declared) {
      if (v.name.empty() ? c.index == v.index : c.name == v.name) target = &c;
    }
    if (!target) {
      return Status::error("the library declares no function constant " +
                           (v.name.empty() ? "at index " + std::to_string(v.index) : "named '" + v.name + "'"));
    }
    std::string error;
    const std::string literal = value_literal(*target, v, &error);
    if (!error.empty()) return Status::error(error);
    auto [it, inserted] = literals.emplace(target->index, literal);
    if (!inserted && it->second != literal) {
      return Status::error("function constant '" + target->name + "' is given two different values");
    }
  }
  flags->clear();
  for (const auto& [index, literal] : literals) {
    flags->push_back("-DETM_FC_PRESENT_" + std::to_string(index) + "=1");
    flags->push_back("-DETM_FC_VALUE_" + std::to_string(index) + "=" + literal);
  }
  return Status();
}

}  // namespace etm::device::cpu
