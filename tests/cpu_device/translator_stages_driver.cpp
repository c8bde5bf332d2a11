// Runs the translator's front-end stages on MSL without compiling anything, for the table
// tests in test_translator_stages.py. Reads cases from stdin, each opened by a line
// "@@case STAGE" (lex, preprocess, overloads, conditionals, constants, translate, shared_tokens)
// and followed by its MSL; prints one JSON object per case on one line: {"error": ...} or the
// stage's result.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "device/cpu/msl_conditionals.h"
#include "device/cpu/msl_function_constants.h"
#include "device/cpu/msl_lexer.h"
#include "device/cpu/msl_overload_sets.h"
#include "device/cpu/msl_preprocessor.h"
#include "device/cpu/msl_translator.h"

using namespace etm::device::cpu;

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

const char* kind_name(TokenKind kind) {
  switch (kind) {
    case TokenKind::identifier: return "identifier";
    case TokenKind::number: return "number";
    case TokenKind::literal: return "literal";
    case TokenKind::punctuator: return "punctuator";
    case TokenKind::directive: return "directive";
  }
  return "?";
}

const char* kind_name(KernelArgumentKind kind) {
  switch (kind) {
    case KernelArgumentKind::buffer: return "buffer";
    case KernelArgumentKind::threadgroup_memory: return "threadgroup_memory";
    case KernelArgumentKind::thread_attribute: return "thread_attribute";
  }
  return "?";
}

std::string error_result(const std::string& message) { return "{\"error\": " + quoted(message) + "}"; }

std::string constants_json(const std::vector<FunctionConstant>& constants) {
  std::string out = "[";
  for (size_t i = 0; i < constants.size(); ++i) {
    out += std::string(i ? ", " : "") + "{\"name\": " + quoted(constants[i].name) +
           ", \"index\": " + std::to_string(constants[i].index) + ", \"type\": " + quoted(constants[i].type) + "}";
  }
  return out + "]";
}

bool lex(const std::string& source, std::vector<Token>* tokens, std::string* result) {
  std::string error;
  if (lex_msl(source, tokens, &error)) return true;
  *result = error_result(error);
  return false;
}

std::string run_lex(const std::string& source) {
  std::vector<Token> tokens;
  std::string result;
  if (!lex(source, &tokens, &result)) return result;
  result = "{\"tokens\": [";
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    result += std::string(i ? ", " : "") + "[" + quoted(kind_name(t.kind)) + ", " +
              quoted(source.substr(t.begin, t.end - t.begin)) + ", " + std::to_string(t.line) + "]";
  }
  return result + "]}";
}

std::string run_preprocess(const std::string& source) {
  std::vector<Token> tokens;
  std::string result;
  if (!lex(source, &tokens, &result)) return result;
  std::string out;
  const etm::device::Status status = preprocess_msl(source, tokens, kCpuMetalVersion, &out);
  if (!status.ok()) return error_result(status.message());
  return "{\"text\": " + quoted(out) + "}";
}

std::string run_overloads(const std::string& source) {
  std::vector<Token> tokens;
  std::string result;
  if (!lex(source, &tokens, &result)) return result;
  std::string out;
  const etm::device::Status status = rewrite_overload_sets(source, tokens, &out);
  if (!status.ok()) return error_result(status.message());
  return "{\"text\": " + quoted(out) + "}";
}

std::string run_conditionals(const std::string& source) {
  std::vector<Token> tokens;
  std::string result;
  if (!lex(source, &tokens, &result)) return result;
  return "{\"text\": " + quoted(rewrite_bfloat_conditionals(source, tokens)) + "}";
}

std::string run_constants(const std::string& source) {
  std::vector<Token> tokens;
  std::string result;
  if (!lex(source, &tokens, &result)) return result;
  std::string out;
  std::vector<FunctionConstant> constants;
  const etm::device::Status status = rewrite_function_constants(source, tokens, &out, &constants);
  if (!status.ok()) return error_result(status.message());
  return "{\"text\": " + quoted(out) + ", \"constants\": " + constants_json(constants) + "}";
}

std::string run_translate(const std::string& source) {
  MslTranslation translation;
  const etm::device::Status status = translate_msl(source, MslTranslationOptions(), &translation);
  if (!status.ok()) return error_result(status.message());
  std::string out = "{\"kernels\": [";
  for (size_t i = 0; i < translation.kernels.size(); ++i) {
    const TranslatedKernel& k = translation.kernels[i];
    out += std::string(i ? ", " : "") + "{\"name\": " + quoted(k.name) + ", \"entry\": " +
           std::to_string(k.entry_index) + ", \"line\": " + std::to_string(k.line) +
           ", \"max_threads\": " + std::to_string(k.max_total_threads_per_threadgroup) + ", \"arguments\": [";
    for (size_t j = 0; j < k.arguments.size(); ++j) {
      const KernelArgument& a = k.arguments[j];
      out += std::string(j ? ", " : "") + "{\"name\": " + quoted(a.name) + ", \"kind\": " +
             quoted(kind_name(a.kind)) + ", \"index\": " + std::to_string(a.index) +
             ", \"type\": " + quoted(a.type) + ", \"address_space\": " + quoted(a.address_space) +
             ", \"by_reference\": " + (a.by_reference ? "true" : "false") +
             ", \"writable\": " + (a.writable ? "true" : "false") +
             ", \"optional\": " + (a.optional ? "true" : "false") + ", \"attribute\": " + quoted(a.attribute) + "}";
    }
    out += "]}";
  }
  return out + "], \"constants\": " + constants_json(translation.function_constants) +
         ", \"source\": " + quoted(translation.source) + "}";
}

bool same_tokens(const std::vector<Token>& a, const std::vector<Token>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].begin != b[i].begin || a[i].end != b[i].end || a[i].line != b[i].line) return false;
  }
  return true;
}

// Each rewriting stage's output tokens, as translate_msl passes them on, against lexing its
// output text again: {"same": [preprocess, overloads, constants]}.
std::string run_shared_tokens(const std::string& source) {
  std::vector<Token> tokens, relexed;
  std::string result, error;
  if (!lex(source, &tokens, &result)) return result;
  std::string text = source, next;
  std::vector<Token> next_tokens;
  std::vector<FunctionConstant> constants;
  std::string same;
  for (int stage = 0; stage < 3; ++stage) {
    next_tokens.clear();
    const etm::device::Status status =
        stage == 0   ? preprocess_msl(text, tokens, kCpuMetalVersion, &next, &next_tokens)
        : stage == 1 ? rewrite_overload_sets(text, tokens, &next, &next_tokens)
                     : rewrite_function_constants(text, tokens, &next, &constants, &next_tokens);
    if (!status.ok()) return error_result(status.message());
    relexed.clear();
    if (!lex_msl(next, &relexed, &error)) return error_result(error);
    same += std::string(stage ? ", " : "") + (same_tokens(next_tokens, relexed) ? "true" : "false");
    text = next;
    tokens = next_tokens;
  }
  return "{\"same\": [" + same + "]}";
}

std::string run_case(const std::string& stage, const std::string& source) {
  if (stage == "lex") return run_lex(source);
  if (stage == "preprocess") return run_preprocess(source);
  if (stage == "overloads") return run_overloads(source);
  if (stage == "conditionals") return run_conditionals(source);
  if (stage == "constants") return run_constants(source);
  if (stage == "translate") return run_translate(source);
  if (stage == "shared_tokens") return run_shared_tokens(source);
  return error_result("unknown stage '" + stage + "'");
}

}  // namespace

int main() {
  const std::string marker = "@@case ";
  std::string stage, source, line;
  bool open = false;
  auto flush = [&] {
    if (open) std::cout << run_case(stage, source) << "\n";
    source.clear();
  };
  while (std::getline(std::cin, line)) {
    if (line.compare(0, marker.size(), marker) == 0) {
      flush();
      stage = line.substr(marker.size());
      open = true;
    } else {
      source += line + "\n";
    }
  }
  flush();
  return 0;
}
