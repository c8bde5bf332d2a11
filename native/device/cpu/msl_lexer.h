// Splits MSL (C++) source into tokens: the one lexer every translation stage uses.
// Comments and whitespace are skipped; a preprocessor directive (with its continuation
// lines) is one token. Tokens keep their byte range and line in the source.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace etm::device::cpu {

enum class TokenKind { identifier, number, literal, punctuator, directive };

struct Token {
  TokenKind kind;
  size_t begin;
  size_t end;
  int line;
};

bool is_identifier_start(char c);
bool is_identifier_char(char c);

// Tokenizes `text`; on failure `error` says "N: what" (N: the line).
bool lex_msl(const std::string& text, std::vector<Token>* tokens, std::string* error);

// How the token changes the nesting of template argument lists: +1 for `<`, -1 for `>`, -2
// for `>>`, else 0. Whether a `<` opens a list is the caller's judgement (it stops at `;`).
int angle_depth_change(const std::string& text, const Token& token);

}  // namespace etm::device::cpu
