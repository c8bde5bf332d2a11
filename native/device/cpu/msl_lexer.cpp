#include "device/cpu/msl_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>

namespace etm::device::cpu {

bool is_identifier_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

namespace {

// Multi-character punctuators, longest first.
const char* const kPunctuators[] = {"...", "<<=", ">>=", "->*", "::", "->", "++", "--", "<<",
                                    ">>",  "<=",  ">=",  "==",  "!=", "&&", "||", "+=", "-=",
                                    "*=",  "/=",  "%=",  "&=",  "|=", "^=", "##", ".*"};

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
          *error = std::to_string(line_) + ": unterminated comment";
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
      *error = std::to_string(line_) + ": unterminated literal";
      return false;
    }
    ++pos_;
    return true;
  }

  bool lex_raw_string(std::string* error) {
    ++pos_;  // the opening quote
    const size_t paren = text_.find('(', pos_);
    if (paren == std::string::npos) {
      *error = std::to_string(line_) + ": malformed raw string literal";
      return false;
    }
    const std::string terminator = ")" + text_.substr(pos_, paren - pos_) + "\"";
    const size_t close = text_.find(terminator, paren);
    if (close == std::string::npos) {
      *error = std::to_string(line_) + ": unterminated raw string literal";
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

}  // namespace

bool lex_msl(const std::string& text, std::vector<Token>* tokens, std::string* error) {
  return Lexer(text).run(tokens, error);
}

bool const_beside(const std::string& text, const std::vector<Token>& tokens, size_t i) {
  auto is = [&](size_t k, const char* s) {
    const size_t n = std::strlen(s);
    return tokens[k].kind != TokenKind::directive && tokens[k].end - tokens[k].begin == n &&
           text.compare(tokens[k].begin, n, s) == 0;
  };
  auto stops = [&](size_t k) {
    if (tokens[k].kind == TokenKind::directive) return true;
    for (const char* s : {"(", ",", ";", "{", "}", "<", ">", "=", "*", "&", "[", ")"})
      if (is(k, s)) return true;
    return false;
  };
  for (size_t k = i; k-- > 0 && !stops(k);)
    if (is(k, "const")) return true;
  for (size_t k = i + 1; k < tokens.size() && !stops(k); ++k)
    if (is(k, "const")) return true;
  return false;
}

int angle_depth_change(const std::string& text, const Token& token) {
  if (token.kind != TokenKind::punctuator || (text[token.begin] != '<' && text[token.begin] != '>')) return 0;
  const size_t length = token.end - token.begin;
  if (length == 1) return text[token.begin] == '<' ? 1 : -1;
  return length == 2 && text[token.begin] == '>' && text[token.begin + 1] == '>' ? -2 : 0;
}

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// Whether the characters a and b, once adjacent, could lex as (part of) one token or start a
// comment or a line continuation; conservative.
bool may_join(char a, char b) {
  if (is_blank(a) || a == '\n' || is_blank(b) || b == '\n') return false;
  if (a == '\\') return true;
  if (is_identifier_char(a) && (is_identifier_char(b) || b == '"' || b == '\'' || b == '.' || b == '+' || b == '-'))
    return true;
  if (a == '.' && std::isdigit(static_cast<unsigned char>(b))) return true;
  if (a == '/' && (b == '/' || b == '*')) return true;
  for (const char* p : kPunctuators) {
    for (size_t k = 0; p[k] && p[k + 1]; ++k) {
      if (p[k] == a && p[k + 1] == b) return true;
    }
  }
  return false;
}

}  // namespace

bool apply_edits(const std::string& text, const std::vector<Token>& tokens, const std::vector<TextEdit>& edits,
                 std::string* out, std::vector<Token>* out_tokens, std::string* error) {
  std::string result;
  result.reserve(text.size() + text.size() / 8);
  std::vector<Token> moved;
  std::vector<size_t> boundaries;  // positions in result where a replacement starts or ends
  std::vector<size_t> after_edit;  // index in `moved` of the first token kept after each edit
  bool relex = false;
  size_t copied = 0, next = 0;
  int line = 1;        // the line of `text` at `copied`
  int line_shift = 0;  // lines of result minus lines of text, so far
  auto move_until = [&](size_t limit) {
    const size_t shift = result.size() - copied;  // applied before result grows
    for (; next < tokens.size() && tokens[next].end <= limit; ++next) {
      Token t = tokens[next];
      t.begin += shift;
      t.end += shift;
      t.line += line_shift;
      moved.push_back(t);
    }
  };
  for (const TextEdit& e : edits) {
    if (e.begin < copied) continue;
    if (out_tokens) {
      move_until(e.begin);
      if (next < tokens.size() && tokens[next].begin < e.begin) relex = true;  // the edit cuts a token
      for (; next < tokens.size() && tokens[next].begin < e.end; ++next) {
        if (tokens[next].end > e.end) relex = true;
      }
    }
    line += static_cast<int>(std::count(text.begin() + copied, text.begin() + e.begin, '\n'));
    result.append(text, copied, e.begin - copied);
    boundaries.push_back(result.size());
    if (out_tokens && !relex && !e.replacement.empty()) {
      std::vector<Token> fragment;
      std::string ignored;
      if (e.replacement.find('#') != std::string::npos || !lex_msl(e.replacement, &fragment, &ignored)) {
        relex = true;
      } else {
        for (Token t : fragment) {
          t.begin += result.size();
          t.end += result.size();
          t.line += line + line_shift - 1;
          moved.push_back(t);
        }
      }
    }
    result += e.replacement;
    boundaries.push_back(result.size());
    const int removed = static_cast<int>(std::count(text.begin() + e.begin, text.begin() + e.end, '\n'));
    line += removed;
    line_shift += static_cast<int>(std::count(e.replacement.begin(), e.replacement.end(), '\n')) - removed;
    copied = e.end;
    after_edit.push_back(moved.size());
  }
  if (out_tokens) move_until(SIZE_MAX);
  result.append(text, copied, std::string::npos);
  if (out_tokens && !relex) {
    for (const size_t p : boundaries) {
      if (p > 0 && p < result.size() && may_join(result[p - 1], result[p])) relex = true;
    }
    // A `#` right after an edit lexes as a directive exactly when it starts its line.
    for (const size_t k : after_edit) {
      if (relex || k >= moved.size() || result[moved[k].begin] != '#') continue;
      size_t p = moved[k].begin;
      while (p > 0 && is_blank(result[p - 1])) --p;
      const bool line_start = p == 0 || result[p - 1] == '\n';
      if (line_start != (moved[k].kind == TokenKind::directive)) relex = true;
    }
  }
  *out = std::move(result);
  if (!out_tokens) return true;
  if (!relex) {
    *out_tokens = std::move(moved);
    return true;
  }
  out_tokens->clear();
  return lex_msl(*out, out_tokens, error);
}

std::vector<size_t> pair_brackets(const std::string& text, const std::vector<Token>& tokens) {
  std::vector<size_t> partner(tokens.size(), SIZE_MAX);
  std::vector<size_t> open;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].kind != TokenKind::punctuator || tokens[i].end - tokens[i].begin != 1) continue;
    const char c = text[tokens[i].begin];
    if (c == '(' || c == '[' || c == '{') {
      open.push_back(i);
    } else if ((c == ')' || c == ']' || c == '}') && !open.empty()) {
      partner[open.back()] = i;
      partner[i] = open.back();
      open.pop_back();
    }
  }
  return partner;
}

}  // namespace etm::device::cpu
