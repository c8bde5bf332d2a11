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

// Is there a `const` in the same part of a declaration as token i (between brackets, `*`, `&`,
// `,`, `=`, `<`, `>`, `;` and directives)? Where it is, MSL's `constant` there is dropped, else
// written `const`.
bool const_beside(const std::string& text, const std::vector<Token>& tokens, size_t i);

// A stage's change to its input: the bytes [begin, end) become `replacement`.
struct TextEdit {
  size_t begin;
  size_t end;
  std::string replacement;
};

// Applies `edits` (sorted by begin; one starting inside an earlier applied edit is skipped) to
// `text` into *out. With out_tokens, also the tokens of *out without lexing it again: the
// tokens outside the edits move, the replacements are lexed alone; only where that could
// differ from lexing *out (a replacement joining a neighbouring token, holding a `#`, or
// cutting a token; a directive whose line start changed) is *out lexed whole. False, with
// *error as lex_msl gives it, when *out does not lex.
bool apply_edits(const std::string& text, const std::vector<Token>& tokens, const std::vector<TextEdit>& edits,
                 std::string* out, std::vector<Token>* out_tokens, std::string* error);

// The matching bracket of each `(` `[` `{` `)` `]` `}` token, paired by nesting (SIZE_MAX for
// other tokens and for unmatched brackets): every stage jumps over groups with it.
std::vector<size_t> pair_brackets(const std::string& text, const std::vector<Token>& tokens);

}  // namespace etm::device::cpu
