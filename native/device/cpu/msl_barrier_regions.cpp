#include "device/cpu/msl_barrier_regions.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>

namespace etm::device::cpu {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool is_keyword(const std::string& name) {
  static const std::set<std::string> kKeywords = {"if",     "for",      "while",         "switch",
                                                  "return", "sizeof",   "decltype",      "alignof",
                                                  "catch",  "noexcept", "static_assert", "alignas"};
  return kKeywords.count(name) != 0;
}

// Called functions that synchronise: barriers, SIMD-group functions, and c10's helpers
// (threadgroup_sum, simd_argmax ...), all of which carry one of these prefixes.
bool is_synchronising_name(const std::string& name) {
  return starts_with(name, "simd_") || starts_with(name, "quad_") || starts_with(name, "threadgroup_") ||
         starts_with(name, "simdgroup_");
}

// The simd_ / quad_ collectives the region form computes from lane arrays, and how many
// operands each publishes (0: it publishes only that the lane took part).
int collective_operands(const std::string& name) {
  std::string base;
  if (starts_with(name, "simd_")) base = name.substr(5);
  else if (starts_with(name, "quad_")) base = name.substr(5);
  else return -1;
  static const std::set<std::string> kOne = {
      "sum", "product", "min", "max", "and", "or", "xor", "prefix_inclusive_sum", "prefix_exclusive_sum",
      "prefix_inclusive_product", "prefix_exclusive_product", "shuffle", "broadcast", "shuffle_up",
      "shuffle_down", "shuffle_xor", "shuffle_rotate_up", "shuffle_rotate_down", "broadcast_first",
      "ballot", "all", "any"};
  if (kOne.count(base)) return 1;
  if (base == "shuffle_and_fill_up" || base == "shuffle_and_fill_down") return 2;  // data and filling value
  if (base == "active_threads_mask" || base == "is_first") return 0;
  return -1;
}

// simd_ reductions: the group computes every simdgroup's result once all threads have
// published (etm_regions::simd_reduce_<name>), each thread then reads its simdgroup's.
bool is_simd_reduction(const std::string& name) {
  static const std::set<std::string> kReductions = {"simd_sum", "simd_product", "simd_min", "simd_max",
                                                    "simd_and", "simd_or",      "simd_xor"};
  return kReductions.count(name) != 0;
}

// simdgroup matrix operations, which the region form runs once per simdgroup.
bool is_simdgroup_matrix_step(const std::string& name) {
  return name == "simdgroup_load" || name == "simdgroup_store" || name == "simdgroup_multiply" ||
         name == "simdgroup_multiply_accumulate";
}

// Collectives whose operand is a vote (bool) and whose region form is no template.
bool is_vote_collective(const std::string& name) {
  const std::string base = name.substr(5);
  return base == "ballot" || base == "all" || base == "any" || base == "active_threads_mask" || base == "is_first";
}

// c10::metal's threadgroup reductions the region form computes for a whole group
// (etm_barrier_regions.h), with their argument counts; -1 for other names.
int c10_group_helper_arguments(const std::string& name) {
  if (name == "threadgroup_sum" || name == "threadgroup_prod" || name == "threadgroup_max" ||
      name == "threadgroup_min")
    return 4;
  if (name == "threadgroup_argmax" || name == "threadgroup_argmin" || name == "threadgroup_sum2") return 6;
  if (name == "threadgroup_welford_reduce" || name == "threadgroup_welford_combine") return 2;
  return -1;
}

// The c10 helpers those depend on, whose definitions must be the ones re-expressed: a hash of
// their definitions' tokens (name to closing brace, in source order) as torch 2.13 writes them.
bool is_c10_reduction_definition(const std::string& name) {
  return c10_group_helper_arguments(name) >= 0 || name == "simd_sum" || name == "simd_prod" || name == "simd_max" ||
         name == "simd_min" || name == "simd_argmax" || name == "simd_argmin" || name == "simd_broadcast" ||
         name == "welford_combine";
}
constexpr uint64_t kC10ReductionsFingerprint = 12217021879769276372ull;

bool is_matrix_type_name(const std::string& name) {
  return name == "simdgroup_matrix" || name == "simdgroup_float8x8" || name == "simdgroup_half8x8" ||
         name == "simdgroup_bfloat8x8";
}

class Tokens {
 public:
  Tokens(const std::string& text, const std::vector<Token>& tokens, const std::vector<size_t>& partner)
      : text_(text), tokens_(tokens), partner_(partner) {}

  size_t size() const { return tokens_.size(); }
  std::string spell(size_t i) const { return text_.substr(tokens_[i].begin, tokens_[i].end - tokens_[i].begin); }
  bool is(size_t i, const char* s) const {
    if (i >= tokens_.size()) return false;
    const Token& t = tokens_[i];
    const size_t n = std::strlen(s);
    return t.kind != TokenKind::directive && t.end - t.begin == n && text_.compare(t.begin, n, s) == 0;
  }
  bool identifier(size_t i) const { return i < tokens_.size() && tokens_[i].kind == TokenKind::identifier; }
  TokenKind kind(size_t i) const { return tokens_[i].kind; }
  int line(size_t i) const { return tokens_[i].line; }
  size_t partner(size_t i) const { return i < partner_.size() ? partner_[i] : SIZE_MAX; }
  bool const_beside(size_t i) const { return etm::device::cpu::const_beside(text_, tokens_, i); }

  // The `>` closing the `<` at i before the statement ends, or SIZE_MAX.
  size_t closing_angle(size_t i, size_t end) const {
    int depth = 0;
    for (size_t j = i; j < end; ++j) {
      if ((is(j, "(") || is(j, "[")) && partner(j) != SIZE_MAX) {
        j = partner(j);
        continue;
      }
      depth += angle_depth_change(text_, tokens_[j]);
      if (is(j, ";") || is(j, "{") || is(j, "}")) return SIZE_MAX;
      if (depth <= 0) return depth == 0 ? j : SIZE_MAX;
    }
    return SIZE_MAX;
  }

  // Is the identifier at i called (`f(`, `f<...>(`)?
  bool called(size_t i, size_t end) const {
    if (is(i + 1, "(")) return true;
    if (!is(i + 1, "<")) return false;
    const size_t close = closing_angle(i + 1, end);
    return close != SIZE_MAX && is(close + 1, "(");
  }

 private:
  const std::string& text_;
  const std::vector<Token>& tokens_;
  const std::vector<size_t>& partner_;
};

bool range_synchronises(const Tokens& t, size_t begin, size_t end, const std::set<std::string>& synchronising) {
  for (size_t i = begin; i < end; ++i) {
    if (!t.identifier(i)) continue;
    const std::string name = t.spell(i);
    if ((is_synchronising_name(name) || synchronising.count(name)) && t.called(i, end)) return true;
  }
  return false;
}

struct Name {
  std::string name;
  std::string storage;  // the thread's copy (an lvalue over etm__index), for per-thread names
  bool per_thread = false;
  bool matrix = false;
  std::string type;            // of a per-thread copy: the alias etm__t<N>, declared before the frames
  bool before_frames = false;  // a group name in scope where the frame types are declared
};

class RegionWriter {
 public:
  RegionWriter(const RegionKernelSource& source, const SynchronisingFunctions& synchronising)
      : s_(source),
        t_(*source.text, *source.tokens, *source.partner),
        synchronising_(synchronising.all),
        barrier_helpers_(synchronising.barriers_only),
        c10_helpers_known_(synchronising.c10_reductions_known) {}

  bool run(std::string* code, std::string* reason) {
    const size_t open = s_.body_open, close = s_.body_close;
    if (!range_synchronises(t_, open + 1, close, synchronising_)) {
      *reason = kNoSynchronisation;
      return false;
    }
    if (!check_body(open + 1, close)) return failed(reason);
    for (size_t i = open + 1; i < close && !kernel_returns_; ++i) kernel_returns_ = t_.is(i, "return");
    find_matrix_names(open + 1, close);
    if (!check_matrix_products(open + 1, close)) return failed(reason);

    scopes_.push_back({});
    std::string parameters, uniform_attributes;
    unsigned unnamed = 0;
    for (const RegionParameter& p : s_.parameters) {
      if (p.is_attribute) {
        if (p.name.empty()) continue;
        const std::string declaration = "const std::remove_cv_t<" + p.attribute_type + "> " + p.name + " = " +
                                        p.attribute_value + "; (void)" + p.name + "; ";
        if (p.per_thread) {
          if (p.attribute == "thread_index_in_simdgroup" || p.attribute == "thread_index_in_quadgroup" ||
              p.attribute == "thread_index_in_threadgroup")
            selecting_attributes_[p.name] = p.attribute;
          attribute_declarations_[p.name] = declaration;
          scopes_.back().push_back({p.name, "", true, false, "", false});
        } else {
          uniform_attributes += declaration;
          scopes_.back().push_back({p.name, "", false, false, "", true});
        }
        continue;
      }
      std::string name = p.name.empty() ? "etm__unnamed" + std::to_string(unnamed++) : p.name;
      parameters += p.declaration + (p.name.empty() ? " " + name : "") + ", ";
      if (!p.name.empty() && writes(open + 1, close, p.name)) {
        // A parameter the kernel changes (`a += offset;`) becomes a per-thread copy.
        const std::string type = frame_member_type("std::remove_cv_t<decltype(" + name + ")>");
        const std::string member = "m" + std::to_string(next_member_++) + "_" + name;
        members_ += type + " " + member + "; ";
        parameter_copies_ += "etm__frames[etm__i]." + member + " = " + name + "; ";
        scopes_.back().push_back({name, "etm__frames[etm__index]." + member, true, false, type});
      } else {
        scopes_.back().push_back({name, "", false, false, "", true});
      }
    }
    coordinates_ =
        "uint32_t etm__x = etm__index, etm__y = 0, etm__z = 0; if (etm__sx != etm__count) { etm__x = etm__index % "
        "etm__sx; etm__y = (etm__index / etm__sx) % etm__sy; etm__z = etm__index / (etm__sx * etm__sy); } (void)etm__x; "
        "(void)etm__y; (void)etm__z; ";

    spine(open + 1, close, true);
    if (!reason_.empty()) return failed(reason);

    std::string& out = *code;
    out = "\n#if !ETM_CPU_NO_REGIONS\n#line " + std::to_string(t_.line(open)) + "\n" + s_.template_header +
          "ETM_REGION_FUNCTION inline int " + s_.function_name + "(" + parameters +
          "const etm_cpu_launch* etm__launch, const etm_cpu_group* etm__group) { "
          "(void)etm__launch; ETM_REGION_LOCAL_GROUP(etm__group) const uint32_t etm__count = etm__group->thread_count; "
          "const uint32_t etm__sx = etm__group->size[0], etm__sy = etm__group->size[1]; (void)etm__sy; " +
          uniform_attributes + prologue_ + sites_ + "\n" + member_types_ + "struct etm__frame { " + members_ +
          "}; if (sizeof(etm__frame) * etm__count > etm_regions::kMaxFrameBytes) return 1; " +
          (members_.empty() ? ""
                            : "etm__frame* etm__frames = etm_regions::construct_frames<etm__frame>(__builtin_alloca("
                              "sizeof(etm__frame) * etm__count), etm__count); ") +
          matrix_storage() + "uint32_t etm__live = etm__count; (void)etm__live; " +
          // Only a kernel with `return` has threads that are done before the end.
          (kernel_returns_ ? "bool* etm__done = static_cast<bool*>(__builtin_alloca(etm__count)); "
                             "__builtin_memset(etm__done, 0, etm__count); "
                           : "") +
          (parameter_copies_.empty() ? ""
                                     : "for (uint32_t etm__i = 0; etm__i < etm__count; ++etm__i) { " +
                                           parameter_copies_ + "} ") +
          group_sites_ + body_ + "\nreturn 0; }\n#endif\n";
    return true;
  }

 private:
  bool failed(std::string* reason) {
    *reason = reason_;
    return false;
  }
  bool fail(size_t at, const std::string& why) {
    if (reason_.empty()) reason_ = "line " + std::to_string(t_.line(at)) + ": " + why;
    return false;
  }

  // ---- whole-body checks

  bool check_body(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (t_.kind(i) == TokenKind::directive) return fail(i, "a preprocessor directive inside the kernel body");
      if (t_.is(i, "goto")) return fail(i, "goto");
      if (t_.is(i, "[") && t_.is(i + 1, "[")) return fail(i, "an attribute inside the kernel body");
      // A `[` that does not follow an operand opens a lambda.
      if (t_.is(i, "[") && !(t_.identifier(i - 1) || t_.is(i - 1, "]") || t_.is(i - 1, ")"))) {
        return fail(i, "a lambda");
      }
      if (t_.is(i, "asm") || t_.is(i, "__asm__")) return fail(i, "inline assembly");
    }
    return true;
  }

  // Names declared with a simdgroup matrix type anywhere in the body.
  void find_matrix_names(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.identifier(i) || !is_matrix_type_name(t_.spell(i)) || t_.called(i, end)) continue;
      size_t j = i + 1;
      if (t_.is(j, "<")) {
        const size_t close = t_.closing_angle(j, end);
        if (close == SIZE_MAX) continue;
        j = close + 1;
      }
      for (; j < end && !t_.is(j, ";"); ++j) {
        if ((t_.is(j, "(") || t_.is(j, "[") || t_.is(j, "{")) && t_.partner(j) != SIZE_MAX) {
          j = t_.partner(j);
          continue;
        }
        if (t_.identifier(j) && (t_.is(j - 1, ",") || j == i + 1 || t_.is(j - 1, ">")))
          matrix_names_.insert(t_.spell(j));
      }
    }
  }

  // `a * b` on simdgroup matrices is a collective this form cannot see by name.
  bool check_matrix_products(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.is(i, "*") && !t_.is(i, "*=")) continue;
      size_t left = i - 1;
      while ((t_.is(left, "]") || t_.is(left, ")")) && t_.partner(left) != SIZE_MAX) left = t_.partner(left) - 1;
      if ((t_.identifier(left) && matrix_names_.count(t_.spell(left))) ||
          (t_.identifier(i + 1) && matrix_names_.count(t_.spell(i + 1)))) {
        return fail(i, "a product of simdgroup matrices written with '*'");
      }
    }
    return true;
  }

  // Does [begin, end) assign to, increment, or take the address of `name`?
  bool writes(size_t begin, size_t end, const std::string& name) const {
    static const std::set<std::string> kAssignments = {"=",  "+=", "-=", "*=",  "/=",  "%=",
                                                       "&=", "|=", "^=", "<<=", ">>="};
    for (size_t i = begin; i < end; ++i) {
      if (!t_.identifier(i) || t_.spell(i) != name) continue;
      if (t_.is(i - 1, ".") || t_.is(i - 1, "->") || t_.is(i - 1, "::")) continue;
      if (i + 1 < end && t_.kind(i + 1) == TokenKind::punctuator && kAssignments.count(t_.spell(i + 1))) return true;
      if (t_.is(i + 1, "++") || t_.is(i + 1, "--") || t_.is(i - 1, "++") || t_.is(i - 1, "--") ||
          t_.is(i - 1, "&")) {
        return true;
      }
    }
    return false;
  }

  // ---- statements

  // One past the statement starting at i.
  size_t statement_end(size_t i, size_t end) {
    if (i >= end) return end;
    if (t_.is(i, "{")) return t_.partner(i) == SIZE_MAX ? end : t_.partner(i) + 1;
    if (t_.is(i, "if")) {
      size_t paren = i + 1;
      if (t_.is(paren, "constexpr")) ++paren;
      if (!t_.is(paren, "(") || t_.partner(paren) == SIZE_MAX) return end;
      size_t next = statement_end(t_.partner(paren) + 1, end);
      if (t_.is(next, "else")) next = statement_end(next + 1, end);
      return next;
    }
    if (t_.is(i, "for") || t_.is(i, "while") || t_.is(i, "switch")) {
      if (!t_.is(i + 1, "(") || t_.partner(i + 1) == SIZE_MAX) return end;
      return statement_end(t_.partner(i + 1) + 1, end);
    }
    if (t_.is(i, "do")) {
      const size_t body_end = statement_end(i + 1, end);
      if (!t_.is(body_end, "while") || t_.partner(body_end + 1) == SIZE_MAX) return end;
      return t_.partner(body_end + 1) + 2;
    }
    for (size_t j = i; j < end; ++j) {
      if ((t_.is(j, "(") || t_.is(j, "[") || t_.is(j, "{")) && t_.partner(j) != SIZE_MAX) {
        j = t_.partner(j);
        continue;
      }
      if (t_.is(j, ";")) return j + 1;
    }
    return end;
  }

  const Name* find(const std::string& name) const {
    for (size_t s = scopes_.size(); s-- > 0;) {
      for (const Name& n : scopes_[s])
        if (n.name == name) return &n;
    }
    return nullptr;
  }

  // True when [begin, end) names nothing that differs between threads.
  bool uniform(size_t begin, size_t end) const {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.identifier(i) || t_.is(i - 1, ".") || t_.is(i - 1, "->") || t_.is(i - 1, "::")) continue;
      const Name* n = find(t_.spell(i));
      if (n && n->per_thread) return false;
      // Evaluated once for the group, an atomic would run once instead of per thread.
      if (starts_with(t_.spell(i), "atomic_")) return false;
    }
    return true;
  }

  std::string text(size_t begin, size_t end) const {
    std::string out = "\n#line " + std::to_string(t_.line(begin)) + "\n";
    int line = t_.line(begin);
    for (size_t i = begin; i < end; ++i) {
      if (t_.line(i) != line) {
        out.append(size_t(t_.line(i) > line ? t_.line(i) - line : 0), '\n');
        line = t_.line(i);
      } else if (i != begin) {
        out += ' ';
      }
      out += emitted(i);
    }
    return out;
  }

  // The token as the translated source has it: `constant` is `const` (the macro expands to
  // nothing) unless its part of the declaration already says `const`, as the translator rewrites
  // it; unsuffixed floating literals get their `f` when the translator adds it.
  std::string emitted(size_t i) const {
    if (t_.is(i, "constant")) return t_.const_beside(i) ? "" : "const";
    std::string n = t_.spell(i);
    if (!s_.suffix_float_literals || t_.kind(i) != TokenKind::number) return n;
    if (n.size() > 1 && n[0] == '0' && (n[1] == 'x' || n[1] == 'X')) return n;
    const bool floating = n.find('.') != std::string::npos || n.find_first_of("eE") != std::string::npos;
    if (floating && !std::isalpha(static_cast<unsigned char>(n.back()))) n += 'f';
    return n;
  }

  // Region statement text with `return;` marking the thread done.
  bool region_text(size_t begin, size_t end, std::string* out) {
    std::string code = "\n#line " + std::to_string(t_.line(begin)) + "\n";
    int line = t_.line(begin);
    for (size_t i = begin; i < end; ++i) {
      if (t_.line(i) != line) {
        code.append(size_t(t_.line(i) > line ? t_.line(i) - line : 0), '\n');
        line = t_.line(i);
      } else if (i != begin) {
        code += ' ';
      }
      const auto replaced = replacements_.find(i);
      if (replaced != replacements_.end()) {
        code += replaced->second.second;
        i = replaced->second.first - 1;
        continue;
      }
      if (t_.is(i, "return")) {
        if (!t_.is(i + 1, ";")) return fail(i, "a return with a value");
        code += "{ etm__done[etm__index] = true; --etm__live; goto etm__next" + std::to_string(region_id_) + "; }";
        region_returns_ = true;
        ++i;
        continue;
      }
      code += emitted(i);
    }
    *out += code;
    return true;
  }

  // break / continue that leave the statement (they would belong to a loop around it).
  bool jumps_out(size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.is(i, "break") && !t_.is(i, "continue")) continue;
      bool inside = false;
      for (size_t k = begin; k < i && !inside; ++k) {
        const bool loop = t_.is(k, "for") || t_.is(k, "while") || t_.is(k, "do");
        if (!loop && !(t_.is(k, "switch") && t_.is(i, "break"))) continue;
        inside = statement_end(k, end) > i;
      }
      if (!inside) return true;
    }
    return false;
  }

  void spine(size_t begin, size_t end, bool top) {
    scopes_.push_back({});
    scope_ends_.push_back(end);
    for (size_t i = begin; i < end && reason_.empty();) {
      const size_t next = statement_end(i, end);
      if (next <= i || next > end) {
        fail(i, "cannot parse the statement");
        break;
      }
      statement(i, next, top);
      i = next;
    }
    close_region();
    scope_ends_.pop_back();
    scopes_.pop_back();
  }

  void statement(size_t begin, size_t end, bool top) {
    if (t_.is(begin, ";")) return;
    if (!range_synchronises(t_, begin, end, synchronising_)) {
      region_statement(begin, end, top);
      return;
    }
    if (t_.is(begin, "{")) {
      close_region();
      body_ += "{";
      spine(begin + 1, end - 1, false);
      body_ += "}";
      return;
    }
    if (t_.is(begin, "for") || t_.is(begin, "while")) return uniform_loop(begin, end);
    if (t_.is(begin, "if")) return uniform_if(begin, end);
    size_t call = begin;
    if (t_.is(call, "metal") && t_.is(call + 1, "::")) call += 2;
    if (t_.is(call, "::") && t_.is(call + 1, "metal") && t_.is(call + 2, "::")) call += 3;
    const bool whole_call = t_.identifier(call) && t_.is(call + 1, "(") && t_.partner(call + 1) == end - 2 &&
                            t_.is(end - 1, ";");
    const std::string name = t_.identifier(call) ? t_.spell(call) : "";
    const bool barrier_helper = whole_call && barrier_helpers_.count(name) && t_.partner(call + 1) == call + 2;
    if (whole_call && (name == "threadgroup_barrier" || name == "simdgroup_barrier" || barrier_helper)) {
      if (!masks_.empty()) return void(fail(begin, "a barrier under an if on per-thread values"));
      close_region();
      // What the access checks need to know (no code without them: etm_cpu_kernel.h).
      if (name == "simdgroup_barrier") {
        body_ += "\nfor (uint32_t etm__base = 0; etm__base < etm__count; etm__base += 32u) "
                 "etm_cpu_kernel::pass_simd_sync(etm__base, " + live_lanes() + ");";
      } else {
        body_ += "\netm_cpu_kernel::pass_barrier(etm__live);";
      }
      return;
    }
    if (whole_call && is_simdgroup_matrix_step(name)) {
      return simdgroup_step(name, call + 1, end);
    }
    if (collective_statement(begin, end, top)) return;
    fail(begin, "a statement that synchronises in a form barrier regions do not handle");
  }

  struct CollectiveCall {
    std::string name;
    size_t first;  // the call's first token (a `metal::` qualifier included)
    size_t open;   // its `(`
    std::vector<std::pair<size_t, size_t>> arguments;
    bool group = false;  // a c10::metal threadgroup helper
  };

  // The first token of `c10::metal::name` or `::c10::metal::name` ending at k, or SIZE_MAX.
  size_t c10_qualified(size_t k) const {
    if (!t_.is(k - 1, "::") || !t_.is(k - 2, "metal") || !t_.is(k - 3, "::") || !t_.is(k - 4, "c10")) return SIZE_MAX;
    return t_.is(k - 5, "::") ? k - 5 : k - 4;
  }

  // Splits the arguments of the call whose `(` is at open.
  std::vector<std::pair<size_t, size_t>> call_arguments(size_t open) const {
    std::vector<std::pair<size_t, size_t>> arguments;
    const size_t close = t_.partner(open);
    size_t start = open + 1;
    for (size_t k = open + 1; k <= close && close != SIZE_MAX; ++k) {
      if ((t_.is(k, "(") || t_.is(k, "[") || t_.is(k, "{")) && t_.partner(k) != SIZE_MAX && k != close) {
        k = t_.partner(k);
        continue;
      }
      if (t_.is(k, ",") || k == close) {
        if (k > start) arguments.push_back({start, k});
        start = k + 1;
      }
    }
    return arguments;
  }

  // An expression or declaration statement whose SIMD-group calls are simd_* / quad_*
  // collectives (not nested, not after ?: && ||): one region publishes their operands, the
  // next runs the statement with each call answered from the lane array.
  bool collective_statement(size_t begin, size_t end, bool top) {
    static const std::set<std::string> kStatements = {"if", "for", "while", "do", "switch", "return", "{"};
    if (kStatements.count(t_.spell(begin))) return false;
    std::vector<CollectiveCall> calls;
    // A call after a ?: && || of the statement may be evaluated by some threads only (an
    // operand evaluated conditionally always follows its operator; a call before them, or
    // inside another collective's arguments, is not under them).
    bool conditional = false;
    for (size_t k = begin; k < end; ++k) {
      if (t_.is(k, "?") || t_.is(k, "&&") || t_.is(k, "||")) conditional = true;
      if (!t_.identifier(k) || !t_.called(k, end)) continue;
      const std::string name = t_.spell(k);
      if (!is_synchronising_name(name) && !synchronising_.count(name)) continue;
      if (conditional) {
        fail(k, "'" + name + "' after a ?:, && or || in its statement");
        return true;
      }
      if (c10_group_helper_arguments(name) >= 0 && c10_qualified(k) != SIZE_MAX && t_.is(k + 1, "(")) {
        CollectiveCall call{name, c10_qualified(k), k + 1, call_arguments(k + 1), true};
        if (!c10_helpers_known_) {
          fail(k, "c10::metal::" + name + ": the source does not define it as the torch 2.13 code the region form "
                  "re-expresses");
          return true;
        }
        if (int(call.arguments.size()) != c10_group_helper_arguments(name)) return false;
        if (!masks_.empty()) {
          fail(k, "c10::metal::" + name + " under an if on per-thread values");
          return true;
        }
        if (range_synchronises(t_, k + 2, t_.partner(k + 1), synchronising_)) return false;
        calls.push_back(call);
        k = t_.partner(k + 1);
        continue;
      }
      if (collective_operands(name) < 0 || !t_.is(k + 1, "(")) return false;
      size_t first = k;
      if (t_.is(k - 1, "::")) {
        if (!t_.is(k - 2, "metal")) return false;
        first = t_.is(k - 3, "::") ? k - 3 : k - 2;
      }
      CollectiveCall call{name, first, k + 1, call_arguments(k + 1)};
      if (int(call.arguments.size()) < collective_operands(name)) return false;
      if (range_synchronises(t_, k + 2, t_.partner(k + 1), synchronising_)) return false;
      calls.push_back(call);
      k = t_.partner(k + 1);
    }
    if (calls.empty()) return false;
    // Publish.
    open_region();
    std::vector<std::string> sites;
    std::string group_steps;
    for (const CollectiveCall& call : calls) {
      if (call.group) {
        sites.push_back(group_call(call, &group_steps));
        if (!reason_.empty()) return true;
        continue;
      }
      const std::string site = "etm__c" + std::to_string(next_site_++);
      sites.push_back(site);
      sites_ += "etm_regions::collective " + site +
                "(__builtin_alloca(size_t(etm__count) * etm_regions::kCollectiveSlotBytes), "
                "__builtin_alloca(etm_regions::collective::flags_bytes(etm__count)), etm__count); ";
      region_reset_ += site + ".reset(); ";
      std::string operand = "true";
      if (collective_operands(call.name) == 1) {
        operand.clear();
        if (!region_text(call.arguments[0].first, call.arguments[0].second, &operand)) return true;
        if (is_vote_collective(call.name)) operand = "bool(" + operand + ")";
      } else if (collective_operands(call.name) == 2) {
        std::string data, fill;
        if (!region_text(call.arguments[0].first, call.arguments[0].second, &data) ||
            !region_text(call.arguments[1].first, call.arguments[1].second, &fill))
          return true;
        const std::string type = "std::decay_t<decltype(" + data + "\n)>";
        operand = "etm_msl::data_and_fill<" + type + ">{" + data + "\n, static_cast<" + type + ">(" + fill + "\n)}";
      }
      region_code_ += site + ".publish(etm__index, " + operand + "); etm_cpu_kernel::pass_simd_sync(etm__index, 1); ";
      region_has_code_ = true;
    }
    close_region();
    // c10's helpers pass barriers; their group computation writes and reads the threadgroup
    // buffer they get on the threads' behalf, between barriers of its own.
    if (!group_steps.empty())
      body_ += "\netm_cpu_kernel::pass_barrier(etm__live);" + group_steps + "\netm_cpu_kernel::pass_barrier(etm__live);";
    // The simd_ reductions, for the whole group. Their operand type is the operand's in a
    // thread's view (thread 0's names, unevaluated).
    for (size_t c = 0; c < calls.size(); ++c) {
      if (calls[c].group || !is_simd_reduction(calls[c].name)) continue;
      std::string operand;
      region_text(calls[c].arguments[0].first, calls[c].arguments[0].second, &operand);
      body_ += "\n{ const uint32_t etm__index = 0; (void)etm__index; " + coordinates_ + thread_names(true) +
               "etm_regions::simd_reduce_" + calls[c].name.substr(5) + "<std::decay_t<decltype(" + operand + "\n)>>(" +
               sites[c] + "); }";
    }
    // Answer.
    for (size_t c = 0; c < calls.size(); ++c) {
      const CollectiveCall& call = calls[c];
      if (call.group) {
        replacements_[call.first] = {t_.partner(call.open) + 1, sites[c] + ".results[etm__index]"};
        continue;
      }
      std::string replacement = "etm_regions::" + (is_simd_reduction(call.name) ? "simd_reduction" : call.name);
      if (!is_vote_collective(call.name)) {
        std::string operand;
        region_text(call.arguments[0].first, call.arguments[0].second, &operand);
        replacement += "<std::decay_t<decltype(" + operand + ")>>";
      }
      replacement += "(" + sites[c] + ", etm__index";
      for (size_t a = size_t(collective_operands(call.name)); a < call.arguments.size(); ++a) {
        std::string argument;
        region_text(call.arguments[a].first, call.arguments[a].second, &argument);
        replacement += ", " + argument;
      }
      replacements_[call.first] = {t_.partner(call.open) + 1, replacement + ")"};
    }
    region_statement(begin, end, top);
    replacements_.clear();
    return true;
  }

  // A c10::metal threadgroup helper's call site: its argument and result types (deduced
  // before the frame), the site, the publishing of the arguments in the open region, and in
  // *steps the group's computation (etm_barrier_regions.h). Returns the site's name.
  std::string group_call(const CollectiveCall& call, std::string* steps) {
    const std::string id = std::to_string(next_site_++);
    const std::string site = "etm__g" + id, arguments = "etm__a" + id, result = "etm__r" + id;
    std::string list, whole;
    for (const auto& [first, last] : call.arguments) {
      std::string argument;
      if (!region_text(first, last, &argument)) return site;
      list += (list.empty() ? "" : ", ") + argument + "\n";
    }
    if (!region_text(call.first, t_.partner(call.open) + 1, &whole)) return site;
    member_types_ += "using " + arguments + " = decltype(({ " + type_context() + "etm_regions::arguments_of(" + list +
                     "); })); using " + result + "_returned = decltype(({ " + type_context() + whole + "\n; })); using " + result +
                     " = std::decay_t<" + result + "_returned>; ";
    const std::string type = "etm_regions::group_call<" + arguments + ", " + result + ">";
    group_sites_ += type + " " + site + "(__builtin_alloca(sizeof(" + arguments + ") * etm__count), __builtin_alloca(sizeof(" +
                    result + ") * etm__count), __builtin_alloca(etm__count)); ";
    group_stand_ins_ += "auto& " + site + " = etm_regions::stand_in<" + type + ">(); (void)" + site + "; ";
    region_reset_ += site + ".reset(etm__count); ";
    region_code_ += site + ".publish(etm__index, etm_regions::arguments_of(" + list + ")); ";
    region_has_code_ = true;
    *steps += "\netm_regions::c10_" + call.name + "(" + site + ", etm__count);";
    return site;
  }

  // for / while around a barrier: runs once for the group.
  // Does [begin, end) call threadgroup_barrier (or a barrier helper)?
  bool has_barrier(size_t begin, size_t end) const {
    for (size_t k = begin; k < end; ++k) {
      if (!t_.identifier(k) || !t_.is(k + 1, "(")) continue;
      const std::string name = t_.spell(k);
      if (name == "threadgroup_barrier" || barrier_helpers_.count(name) || c10_group_helper_arguments(name) >= 0)
        return true;
    }
    return false;
  }

  // Per-thread attributes named in [begin, end).
  bool names_thread_attribute(size_t begin, size_t end) const {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.identifier(i) || t_.is(i - 1, ".") || t_.is(i - 1, "->") || t_.is(i - 1, "::")) continue;
      const Name* n = find(t_.spell(i));
      if (n && n->per_thread && n->storage.empty()) return true;
    }
    return false;
  }

  // for / while around a barrier: runs once for the group. A header that names per-thread
  // variables is read in the first live thread's frame: Metal requires every thread of the
  // group to reach the barrier in it, so its trip count is uniform (as POCL assumes).
  void uniform_loop(size_t begin, size_t end) {
    const size_t open = begin + 1, close = t_.partner(begin + 1);
    if (range_synchronises(t_, open + 1, close, synchronising_)) {
      fail(begin, "a SIMD-group call in a loop header");
      return;
    }
    // Variables the header declares are the group's (they hide outer names in the header too);
    // the body must not change them.
    std::vector<Name> header_names;
    if (t_.is(begin, "for")) {
      size_t semicolon = open + 1;
      while (semicolon < close && !t_.is(semicolon, ";")) {
        const bool group = t_.is(semicolon, "(") || t_.is(semicolon, "[") || t_.is(semicolon, "{");
        if (group && t_.partner(semicolon) != SIZE_MAX) semicolon = t_.partner(semicolon);
        ++semicolon;
      }
      for (size_t k = open + 1; k < semicolon; ++k) {
        if (!t_.identifier(k) || !(t_.is(k + 1, "=") || t_.is(k + 1, "{") || t_.is(k + 1, ","))) continue;
        header_names.push_back({t_.spell(k), "", false, false, "", false});
      }
    }
    scopes_.push_back(header_names);
    const bool leader_header = !uniform(open + 1, close);
    if (leader_header && !has_barrier(close + 1, end)) {
      scopes_.pop_back();
      return predicated_loop(begin, end);
    }
    if (leader_header && (!masks_.empty() || names_thread_attribute(open + 1, close))) {
      fail(begin, "a loop around a barrier whose condition depends on per-thread values");
      return;
    }
    // The leader's frame would take every thread's step: `i += 1, parity ^= 1` on a per-thread
    // `parity` would change only the leader's copy.
    for (size_t k = open + 1; leader_header && k < close; ++k) {
      const Name* n = t_.identifier(k) ? find(t_.spell(k)) : nullptr;
      if (n && n->per_thread && writes(open + 1, close, n->name)) {
        fail(k, "the header of a loop around a barrier changes the per-thread variable '" + n->name + "'");
        return;
      }
    }
    for (const Name& n : header_names) {
      if (writes(close + 1, end, n.name)) {
        fail(begin, "the loop variable '" + n.name + "' of a loop around a barrier changes in its body");
        return;
      }
    }
    close_region();
    if (leader_header) {
      // The header's names are the group's, declared by the loop itself inside this block.
      scopes_.pop_back();
      body_ += std::string(kernel_returns_ ? "{ uint32_t etm__index = 0; while (etm__done[etm__index]) ++etm__index; "
                                           : "{ const uint32_t etm__index = 0; ") +
               thread_names(false);
      scopes_.push_back(header_names);
    }
    body_ += text(begin, close + 1) + " {";
    const size_t body = close + 1;
    if (t_.is(body, "{")) {
      spine(body + 1, end - 1, false);
    } else {
      spine(body, end, false);
    }
    body_ += "}";
    if (leader_header) body_ += "}";
    scopes_.pop_back();
  }

  // for / while on per-thread values around SIMD-group collectives (no barrier): each thread
  // runs its own iterations; the group repeats the body while any thread is still in the loop,
  // for the threads of a per-thread mask (those still iterating), so a collective in it sees
  // exactly the lanes that reach it.
  void predicated_loop(size_t begin, size_t end) {
    const size_t open = begin + 1, close = t_.partner(begin + 1);
    size_t condition_begin = open + 1, condition_end = close, step_begin = close;
    if (t_.is(begin, "for")) {
      std::vector<size_t> semicolons;
      for (size_t k = open + 1; k < close; ++k) {
        if ((t_.is(k, "(") || t_.is(k, "[") || t_.is(k, "{")) && t_.partner(k) != SIZE_MAX) {
          k = t_.partner(k);
          continue;
        }
        if (t_.is(k, ";")) semicolons.push_back(k);
      }
      if (semicolons.size() != 2) return void(fail(begin, "cannot parse the loop header"));
      condition_begin = semicolons[0] + 1;
      condition_end = semicolons[1];
      step_begin = semicolons[1] + 1;
    }
    const std::string mask = "etm__m" + std::to_string(next_site_++), any = mask + "_any";
    sites_ += "bool* " + mask + " = static_cast<bool*>(__builtin_alloca(etm__count)); ";
    scopes_.push_back({});
    // The initialisation (its declarations: the threads' own), and who enters the loop.
    if (t_.is(begin, "for") && condition_begin > open + 2) {
      // Read by the condition and step, regions of their own: in the threads' frames.
      in_loop_header_ = true;
      region_statement(open + 1, condition_begin, false);
      in_loop_header_ = false;
    }
    open_region();
    region_reset_ += "__builtin_memset(" + mask + ", 0, etm__count); ";
    region_code_ += mask + "[etm__index] = true; ";
    region_has_code_ = true;
    close_region();
    body_ += "\nfor (;;) { bool " + any + " = false; ";
    std::string condition = "true";
    if (condition_end > condition_begin) {
      condition.clear();
      if (!region_text(condition_begin, condition_end, &condition)) return;
    }
    masks_.push_back(mask);
    open_region();
    region_code_ += "if (!(" + condition + "\n)) " + mask + "[etm__index] = false; else " + any + " = true; ";
    region_has_code_ = true;
    close_region();
    body_ += " if (!" + any + ") break; ";
    const size_t body = close + 1;
    branch(body, end);
    if (step_begin < close) {
      open_region();
      if (!region_text(step_begin, close, &region_code_)) return;
      region_code_ += ";";
      region_has_code_ = true;
      close_region();
    }
    masks_.pop_back();
    body_ += "}";
    scopes_.pop_back();
  }

  void uniform_if(size_t begin, size_t end) {
    size_t open = begin + 1;
    if (t_.is(open, "constexpr")) ++open;
    const size_t close = t_.partner(open);
    if (range_synchronises(t_, open + 1, close, synchronising_)) {
      fail(begin, "a SIMD-group call in an if condition");
      return;
    }
    if (!uniform(open + 1, close)) return predicated_if(end, open, close);
    close_region();
    body_ += text(begin, close + 1) + " {";
    const size_t then_begin = close + 1;
    const size_t then_end = statement_end(then_begin, end);
    branch(then_begin, then_end);
    body_ += "}";
    if (t_.is(then_end, "else")) {
      body_ += " else {";
      branch(then_end + 1, end);
      body_ += "}";
    }
  }

  // An if on per-thread values around SIMD-group collectives or simdgroup matrix operations
  // (not barriers: Metal requires those to be reached by the whole group): the condition goes
  // into a per-thread mask, and each branch runs for the threads of its mask only, so a
  // collective in it sees those lanes. A mask for `else` only when there is one.
  void predicated_if(size_t end, size_t open, size_t close) {
    for (size_t k = close + 1; k < end; ++k) {
      if (!t_.identifier(k) || !t_.called(k, end)) continue;
      const std::string name = t_.spell(k);
      if ((is_synchronising_name(name) || synchronising_.count(name)) && collective_operands(name) < 0 &&
          !is_simdgroup_matrix_step(name)) {
        fail(k, "a barrier or '" + name + "' under an if on per-thread values");
        return;
      }
    }
    const size_t then_begin = close + 1;
    const size_t then_end = statement_end(then_begin, end);
    const bool has_else = t_.is(then_end, "else");
    const std::string then_mask = "etm__m" + std::to_string(next_site_++);
    const std::string else_mask = then_mask + "_else";
    sites_ += "bool* " + then_mask + " = static_cast<bool*>(__builtin_alloca(etm__count)); ";
    if (has_else) sites_ += "bool* " + else_mask + " = static_cast<bool*>(__builtin_alloca(etm__count)); ";
    open_region();
    region_reset_ += "__builtin_memset(" + then_mask + ", 0, etm__count); ";
    if (has_else) region_reset_ += "__builtin_memset(" + else_mask + ", 0, etm__count); ";
    std::string condition;
    if (!region_text(open + 1, close, &condition)) return;
    region_code_ += "{ const bool etm__c = bool(" + condition + "); " + then_mask + "[etm__index] = etm__c; " +
                    (has_else ? else_mask + "[etm__index] = !etm__c; " : "") + "} ";
    region_has_code_ = true;
    close_region();
    // Each branch is a block of the group's code, as in the kernel: the group's declarations in
    // one (constants, threadgroup memory) may be declared again in the other.
    masks_.push_back(then_mask);
    body_ += "{";
    branch(then_begin, then_end);
    body_ += "}";
    masks_.pop_back();
    if (has_else) {
      masks_.push_back(else_mask);
      body_ += "{";
      branch(then_end + 1, end);
      body_ += "}";
      masks_.pop_back();
    }
  }

  void branch(size_t begin, size_t end) {
    if (t_.is(begin, "{")) {
      spine(begin + 1, end - 1, false);
    } else {
      spine(begin, end, false);
    }
  }

  // The simdgroups' matrix storage (zeroed, as the frames are), when the kernel has matrices.
  std::string matrix_storage() const {
    if (matrix_members_.empty()) return "";
    return "struct etm__matrix_group { " + matrix_members_ +
           "}; const uint32_t etm__simdgroups = (etm__count + 31u) / 32u; if (sizeof(etm__frame) * etm__count + "
           "sizeof(etm__matrix_group) * etm__simdgroups > etm_regions::kMaxFrameBytes) return 1; "
           "etm__matrix_group* etm__matrices = "
           "etm_regions::construct_frames<etm__matrix_group>(__builtin_alloca(sizeof(etm__matrix_group) * "
           "etm__simdgroups), etm__simdgroups); ";
  }

  // The lanes [etm__base, etm__base + 32) that code at this point runs for: the group's, less
  // those that returned, and under an if or loop on per-thread values only its mask's.
  std::string live_lanes() const {
    const std::string lanes = kernel_returns_ ? "etm_regions::active_lanes(etm__done, etm__base, etm__count)"
                                              : "etm_regions::group_lanes(etm__base, etm__count)";
    if (masks_.empty()) return lanes;
    const std::string masked = "etm_regions::flagged_lanes(" + masks_.back() + ", etm__base, etm__count)";
    return kernel_returns_ ? masked + " & " + lanes : masked;
  }

  // Each name in scope by its innermost declaration (an inner one hides an outer one of any
  // kind, as in the kernel), outer scopes first; a per-thread attribute parameter with its
  // declaration in a thread's code.
  struct VisibleName {
    const Name* name;
    std::string attribute;
  };
  std::vector<VisibleName> visible_names() const {
    std::vector<VisibleName> visible;
    std::set<std::string> seen;
    for (size_t s = scopes_.size(); s-- > 0;) {
      for (size_t k = scopes_[s].size(); k-- > 0;) {
        const Name& n = scopes_[s][k];
        if (!seen.insert(n.name).second) continue;
        // The kernel's parameters are the outermost scope.
        const auto attribute = s == 0 ? attribute_declarations_.find(n.name) : attribute_declarations_.end();
        visible.push_back({&n, attribute == attribute_declarations_.end() ? "" : attribute->second});
      }
    }
    return {visible.rbegin(), visible.rend()};
  }

  // The per-thread names in scope in a thread's code: variables as references into its frame,
  // and (with_attributes) thread attributes computed from its coordinates (etm__x, etm__y,
  // etm__z). A name an inner declaration hides is left out: declared beside the inner one, the
  // outer would redeclare it or hide a group name.
  std::string thread_names(bool with_attributes) const {
    std::string code;
    for (const auto& [n, attribute] : visible_names()) {
      if (!n->per_thread) continue;
      if (!n->storage.empty()) code += "auto&& " + n->name + " = " + n->storage + "; (void)" + n->name + "; ";
      else if (with_attributes) code += attribute;
    }
    return code;
  }

  void open_region() {
    if (region_open_) return;
    region_open_ = true;
    region_id_ = next_region_++;
    region_returns_ = false;
    region_has_code_ = false;
    region_code_ = thread_names(true) + "{ ";
    answers_end_ = region_code_.size();
    selected_end_ = SIZE_MAX;
  }

  void close_region() {
    if (!region_open_) return;
    region_open_ = false;
    if (!region_has_code_ && region_reset_.empty()) return;  // declarations without initializers only
    // The group first resets the call sites and masks the region fills.
    body_ += "\n" + region_reset_;
    region_reset_.clear();
    const std::string thread =
        "etm_cpu_kernel::enter_thread(etm__index); " + coordinates_ + region_code_ + "\n}";
    if (selected_end_ == region_code_.size()) {
      // Only the threads the region's `if` selects run anything: the loop visits their lanes.
      body_ += selected_bases_ + " for (uint64_t etm__lanes = (" + live_lanes() + ") & " + selected_lanes_ +
               "; etm__lanes != 0; etm__lanes &= etm__lanes - 1) { const uint32_t etm__index = etm__base + "
               "uint32_t(__builtin_ctzll(etm__lanes)); " + thread;
    } else if (masks_.empty()) {
      // In a kernel without `return` no thread is ever done: the loop tests nothing, which lets
      // the compiler vectorise it.
      body_ += "for (uint32_t etm__index = 0; etm__index < etm__count; ++etm__index) { " +
               std::string(kernel_returns_ ? "if (etm__done[etm__index]) continue; " : "") + thread;
    } else {
      // Under a predicated branch the loop visits the mask's threads only (not returned), by
      // their bits 32 lanes at a time: a branch often holds a few threads of the group.
      body_ += "for (uint32_t etm__base = 0; etm__base < etm__count; etm__base += 32u) for (uint64_t etm__lanes = " +
               live_lanes() + "; etm__lanes != 0; etm__lanes &= etm__lanes - 1) { const uint32_t etm__index = etm__base + "
               "uint32_t(__builtin_ctzll(etm__lanes)); " + thread;
    }
    if (region_returns_) body_ += " etm__next" + std::to_string(region_id_) + ":;";
    body_ += " }";
    // Once every thread has returned, nothing after runs (group-level code included).
    if (region_returns_) body_ += " if (etm__live == 0) return 0;";
  }

  // A statement with no barrier or SIMD-group call.
  void region_statement(size_t begin, size_t end, bool top) {
    if (jumps_out(begin, end)) {
      fail(begin, "break or continue out of a statement between barriers");
      return;
    }
    for (size_t k = begin; k < end; ++k) {
      if (t_.is(k, "threadgroup") && k != begin) {
        bool pointer = false;
        for (size_t j = k; j < end && !t_.is(j, ";") && !t_.is(j, "=") && !pointer; ++j) pointer = t_.is(j, "*");
        if (!pointer) {
          fail(k, "a threadgroup variable declared inside a nested statement");
          return;
        }
      }
    }
    if (t_.is(begin, "constexpr") || t_.is(begin, "static") || t_.is(begin, "using") || t_.is(begin, "typedef") ||
        t_.is(begin, "struct") || t_.is(begin, "class") || t_.is(begin, "enum") || t_.is(begin, "union") ||
        (t_.is(begin, "threadgroup") && !has_pointer_declarator(begin, end))) {
      // The group's own: constants, types, threadgroup memory (a local of the region function,
      // which runs the whole group; with access checks the thread form's arena slot, which the
      // checks follow).
      std::string declaration = text(begin, end);
      if (t_.is(begin, "threadgroup") && s_.threadgroup_slots && s_.threadgroup_slots->count(begin))
        declaration = "\n#if ETM_CPU_VALIDATE\n" + s_.threadgroup_slots->at(begin) + "\n#else" + declaration + "\n#endif\n";
      if (top) {
        prologue_ += declaration;
      } else {
        close_region();
        body_ += declaration;
      }
      if (t_.is(begin, "constexpr") || t_.is(begin, "static") || t_.is(begin, "threadgroup"))
        declare_group_names(begin, end, top);
      return;
    }
    open_region();
    if (!declaration(begin, end)) {
      std::string bases, lanes;
      const bool selecting = region_code_.size() == answers_end_ && selects_lanes(begin, end, &bases, &lanes);
      if (reason_.empty()) region_text(begin, end, &region_code_);
      region_has_code_ = true;
      if (selecting) {
        selected_end_ = region_code_.size();
        selected_bases_ = bases;
        selected_lanes_ = lanes;
      }
    }
  }

  // `if (lane == K) statement` without else, lane a thread attribute that names one thread of
  // each simdgroup (thread_index_in_simdgroup), of each quad or of the group
  // (thread_index_in_threadgroup): in *bases the loop (or if) over the simdgroups that hold
  // them, setting etm__base, and in *lanes an expression of their bits among lanes
  // [etm__base, etm__base + 32). A region that holds nothing else (but declarations answered by
  // simd_ reductions, which read and change nothing) runs for those threads only.
  bool selects_lanes(size_t begin, size_t end, std::string* bases, std::string* lanes) const {
    if (!t_.is(begin, "if") || !t_.is(begin + 1, "(")) return false;
    const size_t close = t_.partner(begin + 1);
    if (close != begin + 5 || !t_.is(begin + 3, "==")) return false;
    for (size_t k = close + 1; k < end; ++k)
      if (t_.is(k, "else")) return false;
    const size_t name = t_.identifier(begin + 2) ? begin + 2 : begin + 4;
    const size_t literal = name == begin + 2 ? begin + 4 : begin + 2;
    if (!t_.identifier(name) || t_.kind(literal) != TokenKind::number) return false;
    const auto attribute = selecting_attributes_.find(t_.spell(name));
    if (attribute == selecting_attributes_.end() || !names_parameter(attribute->first)) return false;
    std::string digits = t_.spell(literal);
    if (!digits.empty() && (digits.back() == 'u' || digits.back() == 'U')) digits.pop_back();
    if (digits.empty() || digits.size() > 4 || (digits.size() > 1 && digits[0] == '0')) return false;
    for (char c : digits)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    const unsigned value = unsigned(std::stoul(digits));
    *bases = "for (uint32_t etm__base = 0; etm__base < etm__count; etm__base += 32u)";
    if (attribute->second == "thread_index_in_simdgroup") {
      if (value >= 32) return false;
      *lanes = "(uint64_t(1) << " + std::to_string(value) + ")";
    } else if (attribute->second == "thread_index_in_quadgroup") {
      if (value >= 4) return false;
      *lanes = "(uint64_t(0x11111111u) << " + std::to_string(value) + ")";
    } else {
      if (value >= 1024) return false;
      const std::string base = std::to_string(value & ~31u) + "u";
      *bases = "for (uint32_t etm__base = " + base + "; etm__base <= " + base +
               " && etm__base < etm__count; etm__base += 32u)";
      *lanes = "(uint64_t(1) << " + std::to_string(value % 32u) + ")";
    }
    return true;
  }

  // Does `name` here still name the kernel's parameter (no inner declaration hides it)?
  bool names_parameter(const std::string& name) const {
    for (size_t s = scopes_.size(); s-- > 1;)
      for (const Name& n : scopes_[s])
        if (n.name == name) return false;
    return true;
  }

  bool has_pointer_declarator(size_t begin, size_t end) const {
    for (size_t k = begin; k < end && !t_.is(k, "=") && !t_.is(k, "["); ++k)
      if (t_.is(k, "*") || t_.is(k, "&")) return true;
    return false;
  }

  void declare_group_names(size_t begin, size_t end, bool before_frames) {
    for (size_t k = begin; k < end; ++k) {
      if ((t_.is(k, "(") || t_.is(k, "[") || t_.is(k, "{")) && t_.partner(k) != SIZE_MAX) {
        k = t_.partner(k);
        continue;
      }
      if (t_.identifier(k) && (t_.is(k + 1, "=") || t_.is(k + 1, ";") || t_.is(k + 1, "[") || t_.is(k + 1, "{") ||
                               t_.is(k + 1, ","))) {
        scopes_.back().push_back({t_.spell(k), "", false, false, "", before_frames});
      }
    }
  }

  // `T a = x, b[4];` at a level with barriers: each name moves into the frame, and the
  // statement becomes assignments. False when the statement is no declaration.
  bool declaration(size_t begin, size_t end) {
    // The type: identifiers, `::`, template arguments, `*`, `const`; then the first name.
    size_t k = begin;
    if (!t_.identifier(k) && !t_.is(k, "::")) return false;
    static const std::set<std::string> kStatements = {"return", "if",    "for",   "while",  "do",    "switch",
                                                      "break",  "continue", "case", "default", "else", "delete"};
    if (kStatements.count(t_.spell(k))) return false;
    size_t name = SIZE_MAX;
    for (; k < end; ++k) {
      if (t_.is(k, "<")) {
        const size_t close = t_.closing_angle(k, end);
        if (close == SIZE_MAX) return false;
        k = close;
        continue;
      }
      if (t_.identifier(k) || t_.is(k, "::") || t_.is(k, "*")) {
        if (t_.identifier(k) && k > begin && (t_.is(k + 1, "=") || t_.is(k + 1, ";") || t_.is(k + 1, "[") ||
                                              t_.is(k + 1, "{") || t_.is(k + 1, ",") || t_.is(k + 1, "("))) {
          // A block-scope declarator is unqualified: `S::f(x);` or `S::v = x;` is an expression.
          if (t_.is(k - 1, "::")) return false;
          name = k;
          break;
        }
        continue;
      }
      if (t_.is(k, "&") || t_.is(k, "&&")) {
        if (k > begin && t_.identifier(k + 1) && (t_.is(k + 2, "=") || t_.is(k + 2, ";"))) {
          fail(k, "a reference declared at a level with barriers");
          return true;
        }
        return false;
      }
      return false;
    }
    if (name == SIZE_MAX) return false;
    std::string type;
    for (size_t j = begin; j < name; ++j) type += emitted(j) + " ";
    const bool deduced = t_.is(begin, "auto") || t_.is(begin + 1, "auto") || type.find("auto ") != std::string::npos;
    const bool matrix = type.find("simdgroup_") != std::string::npos;
    if (uniform_constant(begin, name, end)) return true;
    // Declarators, split at top-level commas.
    size_t part = name;
    while (part < end && reason_.empty()) {
      if (!t_.identifier(part)) {
        fail(part, "cannot parse the declaration");
        return true;
      }
      const std::string declared = t_.spell(part);
      size_t j = part + 1;
      std::string dimensions;
      while (t_.is(j, "[") && t_.partner(j) != SIZE_MAX) {
        dimensions += text(j, t_.partner(j) + 1);
        j = t_.partner(j) + 1;
      }
      size_t stop = j;
      while (stop < end && !t_.is(stop, ",") && !t_.is(stop, ";")) {
        if ((t_.is(stop, "(") || t_.is(stop, "[") || t_.is(stop, "{")) && t_.partner(stop) != SIZE_MAX)
          stop = t_.partner(stop);
        // Template arguments of a call (`f<float, 8>(x)`) hold commas that split nothing.
        if (t_.is(stop, "<") && t_.identifier(stop - 1)) {
          const size_t close = t_.closing_angle(stop, end);
          if (close != SIZE_MAX && (t_.is(close + 1, "(") || t_.is(close + 1, "::") || t_.is(close + 1, "{")))
            stop = close;
        }
        ++stop;
      }
      std::string member_type;
      if (deduced) {
        if (!dimensions.empty() || !t_.is(j, "=") || j + 1 >= stop) {
          fail(part, "an 'auto' declaration without '= value' at a level with barriers");
          return true;
        }
        if (!deduced_type(j + 1, stop, &member_type)) return true;
      } else {
        member_type = frame_member_type("std::remove_cv_t<" + type + ">" + dimensions);
      }
      if (!matrix && dimensions.empty() && region_local(declared, end)) {
        // Read only in the region that declares it: a local of each thread's code there, not a
        // frame member (zero-initialised without an initialiser, as frames are).
        std::string initialiser = "{}";
        if (j < stop) {
          initialiser.clear();
          if (!region_text(j, stop, &initialiser)) return true;
        }
        const bool answer = region_code_.size() == answers_end_ && j < stop && t_.is(j, "=") &&
                            answered_by_reduction(j + 1, stop);
        region_code_ += member_type + " " + declared + initialiser + "\n; (void)" + declared + "; ";
        region_has_code_ = true;
        if (answer) answers_end_ = region_code_.size();
        scopes_.back().push_back({declared, "", true, false, member_type});
        part = stop + 1;
        if (t_.is(stop, ";")) break;
        continue;
      }
      const std::string member = "m" + std::to_string(next_member_++) + "_" + declared;
      std::string storage = "etm__frames[etm__index]." + member;
      if (matrix) {
        // Matrices are stored by simdgroup (etm_regions::lane_matrices), the lanes side by side.
        matrix_members_ += "etm_regions::lane_matrices<" + member_type + "> " + member + "; ";
        storage = "etm_regions::lane_at(etm__matrices[etm__index >> 5]." + member + ", etm__index & 31u)";
      } else {
        members_ += member_type + " " + member + "; ";
      }
      region_code_ += "auto&& " + declared + " = " + storage + "; (void)" + declared + "; ";
      if (j < stop && !dimensions.empty()) {
        // An array initialiser fills a local array of the same type, copied into the thread's copy.
        std::string initial;
        region_text(t_.is(j, "=") ? j + 1 : j, stop, &initial);
        region_code_ += "{ std::remove_cv_t<" + type + "> etm__initial" + dimensions + " = " + initial + "; ";
        region_code_ += matrix ? "etm_regions::assign_lane(" + declared + ", etm__initial); } "
                               : "__builtin_memcpy(static_cast<void*>(&" + declared +
                                     "), static_cast<const void*>(&etm__initial), sizeof(" + declared + ")); } ";
        region_has_code_ = true;
      } else if (j < stop) {
        std::string value;
        if (t_.is(j, "=")) {
          region_text(j + 1, stop, &value);
        } else {
          region_text(j, stop, &value);
          value = "std::remove_cv_t<" + type + ">" + value;
        }
        region_code_ += declared + " = " + value + "; ";
        region_has_code_ = true;
      }
      scopes_.back().push_back({declared, storage, true, matrix, member_type});
      part = stop + 1;
      if (t_.is(stop, ";")) break;
    }
    return true;
  }

  // Is [begin, end) one simd_ reduction's call, answered from its site (a read, no effect)?
  bool answered_by_reduction(size_t begin, size_t end) const {
    const auto replaced = replacements_.find(begin);
    return replaced != replacements_.end() && replaced->second.first == end &&
           replaced->second.second.rfind("etm_regions::simd_reduction<", 0) == 0;
  }

  // Does the statement [begin, end) end the region it would run in? Those that synchronise do,
  // and those the group runs itself: declarations of constants, types and threadgroup memory,
  // and `const` declarations (a uniform one is computed once for the group between regions).
  bool ends_region(size_t begin, size_t end) const {
    if (range_synchronises(t_, begin, end, synchronising_)) return true;
    static const std::set<std::string> kGroupStatements = {"constexpr", "static", "using", "typedef", "struct",
                                                           "class",     "enum",   "union", "threadgroup"};
    if (kGroupStatements.count(t_.spell(begin))) return true;
    for (size_t k = begin; k < end; ++k) {
      if (t_.is(k, "=") || t_.is(k, "(") || t_.is(k, "{") || t_.is(k, ";")) break;
      if (t_.is(k, "const") || t_.is(k, "constant")) return true;
    }
    return false;
  }

  // Is the scalar or struct `name`, declared by a statement that ends at `from`, read only in
  // the region that declares it (nowhere past the first statement after it that ends the
  // region, up to the end of its scope) and its address never taken (a pointer to it could be
  // read later)? Then it needs no frame member. Arrays, which decay to pointers, keep theirs.
  bool region_local(const std::string& name, size_t from) {
    if (in_loop_header_ || scope_ends_.empty()) return false;
    const size_t to = scope_ends_.back();
    bool region_ended = false;
    for (size_t i = from; i < to;) {
      const size_t next = statement_end(i, to);
      if (next <= i) return false;
      region_ended = region_ended || ends_region(i, next);
      for (size_t k = i; k < next; ++k) {
        if (!t_.identifier(k) || t_.spell(k) != name || t_.is(k - 1, ".") || t_.is(k - 1, "->")) continue;
        if (region_ended || t_.is(k - 1, "&")) return false;
      }
      i = next;
    }
    return true;
  }

  // A frame member's type, as an alias declared before the frame (etm__t<N>).
  std::string frame_member_type(const std::string& spelled) {
    const std::string alias = "etm__t" + std::to_string(next_type_++);
    member_types_ += "using " + alias + " = " + spelled + "; ";
    return alias;
  }

  // The type of `auto x = value;`, deduced before the frame is declared: the value's type in
  // an unevaluated statement expression where the per-thread names in scope stand for values
  // of their frame types. Group names declared later than the frame cannot appear in it.
  bool deduced_type(size_t begin, size_t end, std::string* alias) {
    for (size_t i = begin; i < end; ++i) {
      if (!t_.identifier(i) || t_.is(i - 1, ".") || t_.is(i - 1, "->") || t_.is(i - 1, "::")) continue;
      const Name* n = find(t_.spell(i));
      if (n && !n->per_thread && !n->before_frames)
        return fail(i, "an 'auto' declaration whose value names '" + n->name + "', declared between barriers");
      if (n && n->per_thread && !n->storage.empty() && n->type.empty())
        return fail(i, "an 'auto' declaration whose value names '" + n->name + "', whose type is unknown");
    }
    std::string value;
    if (!region_text(begin, end, &value)) return false;
    const std::string id = std::to_string(next_type_);
    member_types_ += "using etm__d" + id + " = decltype(({ " + type_context() + value + "\n; })); ";
    *alias = frame_member_type("std::decay_t<etm__d" + id + ">");
    return true;
  }

  // The start of a statement expression, before the frame, in which a per-thread expression
  // has its type: the thread attributes, and stand-ins for the per-thread names and call sites.
  std::string type_context() const {
    std::string code = "const uint32_t etm__index = 0; (void)etm__index; " + coordinates_ + group_stand_ins_;
    for (const auto& [n, attribute] : visible_names()) {
      if (!n->per_thread) continue;
      if (!n->type.empty())
        code += n->type + "& " + n->name + " = etm_regions::stand_in<" + n->type + ">(); (void)" + n->name + "; ";
      else
        code += attribute;
    }
    return code;
  }

  // `const T x = e;` where e names nothing per-thread: one value for the whole group, computed
  // once where it stands (between the regions around it) and visible to all of them. This
  // keeps loop bounds derived from parameters uniform (`const uint last = min(first + n, p.rows);`).
  bool uniform_constant(size_t begin, size_t name, size_t end) {
    bool top_level_const = false;
    for (size_t k = begin; k < name; ++k) {
      if (t_.is(k, "*") || t_.is(k, "&") || t_.is(k, "&&")) top_level_const = false;
      if (t_.is(k, "const") || t_.is(k, "constant")) top_level_const = true;
    }
    // Under a predicated branch the value might be computed when no thread takes the branch.
    if (!top_level_const || t_.is(begin, "threadgroup") || !masks_.empty()) return false;
    static const std::set<std::string> kWrites = {"=",  "+=", "-=", "*=",  "/=",  "%=", "&=",
                                                  "|=", "^=", "<<=", ">>=", "++", "--"};
    bool initialised = false;
    for (size_t k = name + 1; k < end; ++k) {
      if (t_.is(k, "=") && !initialised) {
        initialised = true;
        continue;
      }
      if (t_.kind(k) == TokenKind::punctuator && kWrites.count(t_.spell(k))) return false;
    }
    if (!initialised || !uniform(name + 1, end) || range_synchronises(t_, name + 1, end, synchronising_)) return false;
    close_region();
    body_ += text(begin, end);
    declare_group_names(name, end, false);
    return true;
  }

  // simdgroup_load / store / multiply(_accumulate): once per simdgroup, on the lanes' frames.
  void simdgroup_step(const std::string& name, size_t open, size_t end) {
    const size_t close = t_.partner(open);
    std::vector<std::pair<size_t, size_t>> arguments;
    size_t start = open + 1;
    for (size_t k = open + 1; k <= close; ++k) {
      if ((t_.is(k, "(") || t_.is(k, "[") || t_.is(k, "{")) && t_.partner(k) != SIZE_MAX && k != close) {
        k = t_.partner(k);
        continue;
      }
      if (t_.is(k, ",") || k == close) {
        arguments.push_back({start, k});
        start = k + 1;
      }
    }
    size_t matrices = 1;
    if (name == "simdgroup_multiply") matrices = 3;
    if (name == "simdgroup_multiply_accumulate") matrices = 4;
    if (arguments.size() < matrices) {
      fail(open, name + " with too few arguments");
      return;
    }
    for (size_t m = 0; m < matrices; ++m) {
      const size_t position = name == "simdgroup_store" ? 0 : m;
      const auto [first, last] = arguments[position];
      const Name* n = t_.identifier(first) ? find(t_.spell(first)) : nullptr;
      size_t k = first + 1;
      while (t_.is(k, "[") && t_.partner(k) != SIZE_MAX) k = t_.partner(k) + 1;
      if (!n || !n->per_thread || !n->matrix || k != last) {
        fail(first, name + " on a matrix that is not a variable declared at a level with barriers");
        return;
      }
    }
    (void)end;
    close_region();
    std::string call;
    region_text(open + 1, close, &call);
    // Under an if or loop on per-thread values, the simdgroup is the lanes of its mask (the
    // threads that reach the call, as on fibers).
    body_ +=
        "\nfor (uint32_t etm__base = 0; etm__base < etm__count; etm__base += 32u) { const uint64_t etm__active = " +
        live_lanes() + "; if (!etm__active) continue; const uint32_t etm__index = etm__base + "
        "uint32_t(__builtin_ctzll(etm__active)); " +
        coordinates_ + thread_names(true) +
        "const etm_regions::simdgroup etm__simdgroup{etm__active, etm__index - etm__base}; "
        "etm_cpu_kernel::pass_simd_sync(etm__base, etm__active); etm_cpu_kernel::enter_thread(etm__index); "
        "etm_regions::" +
        name + "(etm__simdgroup, " + call + "); etm_cpu_kernel::pass_simd_sync(etm__base, etm__active); }";
  }

  const RegionKernelSource& s_;
  Tokens t_;
  const std::set<std::string>& synchronising_;
  const std::set<std::string>& barrier_helpers_;
  const bool c10_helpers_known_;
  std::string reason_;
  std::vector<std::vector<Name>> scopes_;
  std::vector<size_t> scope_ends_;  // one past the last statement of each scope spine() runs
  bool in_loop_header_ = false;     // declaring a per-thread loop's variables
  std::set<std::string> matrix_names_;
  std::string members_;
  std::string matrix_members_;  // of etm__matrix_group: the simdgroup matrices, by simdgroup
  std::string member_types_;  // the frame members' type aliases, in declaration order
  std::string group_sites_;   // the c10 group helpers' call sites (etm_regions::group_call)
  std::string group_stand_ins_;
  std::string parameter_copies_;
  std::string prologue_;
  std::string body_;
  std::string coordinates_;  // a thread's coordinates in the group, from etm__index
  bool region_open_ = false;
  bool region_returns_ = false;
  bool kernel_returns_ = false;  // a `return` anywhere in the kernel body
  bool region_has_code_ = false;
  unsigned region_id_ = 0;
  unsigned next_region_ = 0;
  unsigned next_member_ = 0;
  unsigned next_type_ = 0;
  std::string region_code_;
  std::string region_reset_;  // group code before the region loop: resets the sites it fills
  std::string sites_;         // the collectives' lane arrays and the predicate masks
  std::vector<std::string> masks_;
  std::map<size_t, std::pair<size_t, std::string>> replacements_;  // token -> (end, code)
  // Per-thread attributes an `if (name == K)` can select threads by: name -> attribute.
  std::map<std::string, std::string> selecting_attributes_;
  std::map<std::string, std::string> attribute_declarations_;  // per-thread attribute -> its declaration
  // The open region's code up to answers_end_ only declares locals answered by simd_
  // reductions; when it ends at selected_end_, with an `if` selecting selected_lanes_.
  size_t answers_end_ = 0;
  size_t selected_end_ = SIZE_MAX;
  std::string selected_bases_, selected_lanes_;
  unsigned next_site_ = 0;
};

}  // namespace

bool is_per_thread_attribute(const std::string& attribute) {
  static const std::set<std::string> kPerThread = {
      "thread_position_in_grid",     "thread_position_in_threadgroup", "thread_index_in_threadgroup",
      "thread_index_in_simdgroup",   "simdgroup_index_in_threadgroup", "thread_index_in_quadgroup",
      "quadgroup_index_in_threadgroup"};
  return kPerThread.count(attribute) != 0;
}

SynchronisingFunctions synchronising_functions(const std::string& text, const std::vector<Token>& tokens,
                                               const std::vector<size_t>& partner) {
  const Tokens t(text, tokens, partner);
  struct Function {
    std::string name;
    size_t begin, end;
    bool no_parameters;
    size_t name_at;
  };
  std::vector<Function> functions;
  for (size_t i = 1; i < t.size(); ++i) {
    if (!t.is(i, "(") || !t.identifier(i - 1) || t.partner(i) == SIZE_MAX) continue;
    const std::string name = t.spell(i - 1);
    if (is_keyword(name)) continue;
    size_t j = t.partner(i) + 1;
    while (t.is(j, "const") || t.is(j, "noexcept") || t.is(j, "thread") || t.is(j, "device") ||
           t.is(j, "threadgroup") || t.is(j, "constant"))
      ++j;
    if (t.is(j, "{") && t.partner(j) != SIZE_MAX)
      functions.push_back({name, j + 1, t.partner(j),
                           t.partner(i) == i + 1 || (t.is(i + 1, "void") && t.partner(i) == i + 2), i - 1});
  }
  SynchronisingFunctions found;
  for (bool grew = true; grew;) {
    grew = false;
    for (const Function& f : functions) {
      if (found.all.count(f.name)) continue;
      if (range_synchronises(t, f.begin, f.end, found.all)) {
        found.all.insert(f.name);
        grew = true;
      }
    }
  }
  // Overloads share a name: a name is a barrier helper only when every definition is one.
  std::set<std::string> other;
  for (const Function& f : functions) {
    bool barriers = f.no_parameters && f.end > f.begin;
    for (size_t k = f.begin; k < f.end && barriers;) {
      size_t call = k;
      if (t.is(call, "metal") && t.is(call + 1, "::")) call += 2;
      barriers = t.is(call, "threadgroup_barrier") && t.is(call + 1, "(") && t.partner(call + 1) != SIZE_MAX &&
                 t.is(t.partner(call + 1) + 1, ";");
      if (barriers) k = t.partner(call + 1) + 2;
    }
    (barriers ? found.barriers_only : other).insert(f.name);
  }
  for (const std::string& name : other) found.barriers_only.erase(name);
  uint64_t fingerprint = 1469598103934665603ull;  // FNV-1a
  bool any = false;
  for (const Function& f : functions) {
    if (!is_c10_reduction_definition(f.name)) continue;
    any = true;
    for (size_t k = f.name_at; k <= f.end; ++k) {
      for (char c : t.spell(k) + " ") fingerprint = (fingerprint ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
  }
  found.c10_reductions_known = any && fingerprint == kC10ReductionsFingerprint;
  return found;
}

bool barrier_region_function(const RegionKernelSource& source, const SynchronisingFunctions& synchronising,
                             std::string* code, std::string* reason) {
  return RegionWriter(source, synchronising).run(code, reason);
}

}  // namespace etm::device::cpu
