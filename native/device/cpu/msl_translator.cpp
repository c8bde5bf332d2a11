#include "device/cpu/msl_translator.h"

#include "device/cpu/msl_barrier_regions.h"

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

#include "device/cpu/embedded_headers.h"
#include "device/cpu/kernel_compiler.h"
#include "device/cpu/msl_overload_sets.h"
#include "device/cpu/msl_lexer.h"
#include "device/cpu/msl_preprocessor.h"

namespace etm::device::cpu {
namespace {

// An attribute's integer literal (decimal, hex or octal); UINT32_MAX when it does not fit,
// so that range checks reject it instead of seeing the value wrapped.
uint32_t attribute_integer(const std::string& text) {
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 0);
  return errno == ERANGE || value > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(value);
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

// Names the barrier-region form of kernel f: etm__regions_f.
constexpr const char* kRegionPrefix = "etm__regions_";
// Names the function whose return type is the wrapper of template kernel f: etm__deduce_f.
constexpr const char* kDeducerPrefix = "etm__deduce_";

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
  std::string address_space;  // the MSL address space written before the declarator, or empty
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
  std::string execution_note;  // empty when the kernel has a barrier-region form
};

// The executor's binding of each kernel parameter: buffer index (explicit, else the next free
// one for a pointer or reference), threadgroup-memory index or thread attribute.
bool bind_arguments(const std::vector<Parameter>& parameters, TranslatedKernel* k, std::string* error) {
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
    argument.type = p.type.substr(0, p.type.find_last_not_of(' ') + 1) + (p.is_array ? " *" : "");
    argument.address_space = p.address_space;
    const std::string label = "kernel '" + k->name + "' parameter '" + p.name + "'";
    const AttributeItem* binding = nullptr;
    for (const AttributeItem& a : p.attributes) {
      if (a.name == "buffer" || a.name == "threadgroup" || find_thread_attribute(a.name)) {
        binding = &a;
      } else if (a.name == "texture" || a.name == "sampler" || a.name == "stage_in" ||
                 a.name == "visible_function_table" ||
                 a.name == "intersection_function_table" || a.name == "instance_acceleration_structure" ||
                 a.name == "primitive_acceleration_structure" || a.name == "grid_origin" ||
                 a.name == "grid_size") {
        *error = label + ": [[" + a.name + "]] is not supported by the CPU device";
        return false;
      }
    }
    if (binding && (binding->name == "buffer" || binding->name == "threadgroup")) {
      if (binding->arguments.size() != 1 || !std::isdigit(static_cast<unsigned char>(binding->arguments[0][0]))) {
        *error = label + ": [[" + binding->name + "(n)]] needs an integer literal";
        return false;
      }
      argument.index = attribute_integer(binding->arguments[0]);
      argument.kind = binding->name == "buffer" ? KernelArgumentKind::buffer : KernelArgumentKind::threadgroup_memory;
      if (argument.index >= 31) {
        *error = label + ": " + binding->name + " index " + binding->arguments[0] + " is out of range (0..30)";
        return false;
      }
      if (!p.is_pointer && !p.is_reference && !p.is_array) {
        *error = label + ": a [[" + binding->name + "]] parameter must be a pointer or reference";
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
      *error = label + " has no [[buffer(n)]] or thread attribute and is not a pointer or reference";
      return false;
    }
    if (argument.kind != KernelArgumentKind::thread_attribute) argument.writable = !p.read_only;
    argument.by_reference = argument.kind == KernelArgumentKind::buffer && p.is_reference && !p.is_pointer;
    for (const AttributeItem& a : p.attributes) {
      if (a.name == "function_constant") argument.optional = argument.kind == KernelArgumentKind::buffer;
    }
    k->arguments.push_back(argument);
  }
  return true;
}

// The expression that initializes a thread-attribute parameter of type `type`.
bool attribute_value(const Parameter& p, const ThreadAttribute& a, std::string* out, std::string* error) {
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
    *error = "parameter '" + p.name + "' [[" + a.name + "]] has unsupported type '" + p.type + "'";
    return false;
  }
  std::string value = base + "(";
  for (int c = 0; c < width; ++c) {
    value += (c ? ", " : "") + std::string("static_cast<") + scalar + ">(" + a.components[c] + ")";
  }
  *out = value + ")";
  return true;
}

// The wrapper struct of a kernel: its loop, thread, argument-size and region entries bind the
// parameters from the launch and group (etm_cpu_kernel_abi.h) and call the kernel.
bool wrapper_code(const std::string& kernel_name, const std::string& template_header,
                  const std::string& wrapper_name, const std::string& call_target,
                  const std::vector<Parameter>& parameters, int line, bool has_regions,
                  const std::string& max_threads_expression, std::string* out, std::string* error) {
  TranslatedKernel probe;
  probe.name = kernel_name;
  if (!bind_arguments(parameters, &probe, error)) return false;
  std::string bindings, arguments, sizes, region_arguments;
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
        region_arguments += local + ", ";
        break;
      case KernelArgumentKind::threadgroup_memory:
        bindings += type + " " + local + " = etm_cpu_kernel::bind_pointer<" + type +
                    ">(etm__group->arena + etm__launch->dynamic_threadgroup_offsets[" +
                    std::to_string(a.index) + "]); ";
        arguments += (k ? ", " : "") + local;
        region_arguments += local + ", ";
        break;
      case KernelArgumentKind::thread_attribute: {
        std::string value;
        if (!attribute_value(p, *find_thread_attribute(a.attribute), &value, error)) return false;
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
       << "const uint32_t etm__index = etm__row + etm__x; etm_cpu_kernel::enter_thread(etm__index); " << call
       << " } } } "
       << "static inline void etm__thread(const etm_cpu_launch* etm__launch, const etm_cpu_group* etm__group, uint32_t etm__index) { "
       << "etm_cpu_kernel::enter_group(etm__launch, etm__group); " << bindings
       << "const uint32_t etm__sx = etm__group->size[0], etm__sy = etm__group->size[1]; "
       << "uint32_t etm__x = etm__index, etm__y = 0, etm__z = 0; "
       << "if (etm__sx != etm__group->thread_count) { etm__x = etm__index % etm__sx; "
       << "etm__y = (etm__index / etm__sx) % etm__sy; etm__z = etm__index / (etm__sx * etm__sy); } "
       << "(void)etm__x; (void)etm__y; (void)etm__z; " << call << " } "
       << "static inline void etm__argument_sizes(uint64_t* etm__sizes) { (void)etm__sizes; " << sizes << "} ";
  if (max_threads_expression.empty()) {
    code << "static constexpr uint32_t etm__max_threads = 0; ";
  } else {
    code << "static constexpr uint32_t etm__max_threads = static_cast<uint32_t>(" << max_threads_expression
         << "); static_assert(etm__max_threads >= 1 && etm__max_threads <= 1024, "
         << "\"max_total_threads_per_threadgroup must be in 1..1024\"); ";
  }
  if (has_regions) {
    code << "\n#if !ETM_CPU_NO_REGIONS\n"
         << "static inline int etm__regions(const etm_cpu_launch* etm__launch, const etm_cpu_group* etm__group) { "
         << "etm_cpu_kernel::enter_group(etm__launch, etm__group); " << bindings << "return "
         << kRegionPrefix << call_target << "(" << region_arguments << "etm__launch, etm__group); }\n#endif\n";
  }
  code << "};";
  *out += code.str();
  return true;
}

// The extern "C" entry points of kernel `index`, calling the wrapper `target`.
std::string entry_code(uint32_t index, const std::string& target, int line,
                              const std::string& execution_note) {
  const std::string n = std::to_string(index);
  std::ostringstream code;
  std::string note;
  for (char c : execution_note.empty() ? std::string("barrier regions") : execution_note) {
    if (c == '"' || c == '\\') note += '\\';
    if (c != '\n') note += c;
  }
  code << "\n#if ETM_CPU_KERNEL_SELECTED(" << n << ")\n#line " << line << "\n"
       << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_loop_" << n
       << "(const etm_cpu_launch* l, const etm_cpu_group* g) { " << target << "::etm__loop(l, g); } "
       << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_thread_" << n
       << "(const etm_cpu_launch* l, const etm_cpu_group* g, uint32_t i) { " << target << "::etm__thread(l, g, i); } "
       << "extern \"C\" ETM_CPU_KERNEL_EXPORT void etm_kernel_argument_sizes_" << n
       << "(uint64_t* s) { " << target << "::etm__argument_sizes(s); } "
       << "extern \"C\" ETM_CPU_KERNEL_EXPORT const char etm_kernel_execution_note_" << n << "[] = \"" << note
       << "\"; extern \"C\" ETM_CPU_KERNEL_EXPORT const uint32_t etm_kernel_max_threads_" << n << " = " << target
       << "::etm__max_threads;";
  if (execution_note.empty()) {
    code << "\n#if !ETM_CPU_NO_REGIONS\nextern \"C\" ETM_CPU_KERNEL_EXPORT int etm_kernel_regions_" << n
         << "(const etm_cpu_launch* l, const etm_cpu_group* g) { return " << target
         << "::etm__regions(l, g); }\n#endif";
  }
  code << "\n#endif";
  return code.str();
}

class Translator {
 public:
  Translator(const std::string& text, const std::vector<Token>& tokens, const MslTranslationOptions& options)
      : text_(text), tokens_(tokens), options_(options) {}

  Status run(MslTranslation* out) {
    match_brackets();
    synchronising_ = synchronising_functions(text_, tokens_, partner_);
    strip_attributes_and_constant();
    scan_scope(0, tokens_.size(), {});
    if (!error_.empty()) return Status::error(error_);
    if (options_.suffix_float_literals) suffix_float_literals();

    // Stable: insertions at one place keep the order they were made in.
    std::stable_sort(edits_.begin(), edits_.end(), [](const Edit& a, const Edit& b) {
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

    // Apple's predefined macros come first, as the preprocessor stage assumed them.
    std::string prelude;
    for (const auto& [name, value] : predefined_metal_macros(kCpuMetalVersion)) {
      prelude += "#define " + name + " " + value + "\n";
    }
    out->source = prelude + "#include \"etm_cpu_kernel.h\"\n#include <metal_stdlib>\n#line 1 \"" +
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
  int angle_change(size_t i) const { return i < tokens_.size() ? angle_depth_change(text_, tokens_[i]) : 0; }
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
      depth += angle_change(j);
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
      // A template header's default arguments (`int N = 4`) are no initializer.
      if (is(j, "template") && is(j + 1, "<")) {
        const size_t close = match_angle(j + 1, end);
        if (close != SIZE_MAX) {
          j = close;
          continue;
        }
      }
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
    // A constant expression (`WM * WN * 32` over template parameters) is evaluated by the
    // compiler, per instantiation, into the object (etm_kernel_max_threads_N).
    std::string max_threads_expression;
    for (const AttributeItem& a : attributes) {
      if (a.name == "host_name") {
        for (const std::string& s : a.arguments) {
          if (s.size() >= 2 && s.front() == '"') host_name += s.substr(1, s.size() - 2);
        }
      } else if (a.name == "max_total_threads_per_threadgroup") {
        if (a.arguments.empty()) return fail(line, "max_total_threads_per_threadgroup needs a value");
        if (a.arguments.size() == 1 && std::isdigit(static_cast<unsigned char>(a.arguments[0][0]))) {
          max_threads = attribute_integer(a.arguments[0]);
          if (max_threads == 0 || max_threads > 1024) {
            return fail(line, "max_total_threads_per_threadgroup must be in 1..1024");
          }
        } else if (is_instantiation) {
          return fail(line, "max_total_threads_per_threadgroup of a kernel instantiation needs an integer literal");
        } else {
          max_threads_expression = join(a.arguments, " ");
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
    const size_t head_edits = edits_.size();
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
    // A declaration without a body whose parameters lack their attributes (c10's kernel
    // templates, declared before the macros that instantiate them) leaves the wrapper to the
    // definition.
    if (is(end - 1, ";") && std::any_of(parameters.begin(), parameters.end(), [](const Parameter& q) {
          return q.attributes.empty() && !q.is_pointer && !q.is_reference && !q.is_array;
        }))
      return;
    const std::string key = join_path(namespace_path) + "::" + name;
    if (!declared_kernels_.insert(key).second) return;  // wrapper emitted at first declaration

    const size_t last = end - 1;
    std::string call_target = name;
    std::string template_header;
    std::string wrapper_name = "etm__kernel_" + name;
    std::vector<std::string> names;
    if (is_template) {
      if (!template_parameter_names(begin + 1, template_close, &names)) {
        return fail(line, "cannot parse the template parameters of kernel '" + name + "'");
      }
      template_header = "template " + text_.substr(tokens_[begin + 1].begin,
                                                    tokens_[template_close].end - tokens_[begin + 1].begin) + " ";
      call_target += "<" + join(names, ", ") + ">";
    }
    std::string regions_code, execution_note;
    if (!region_form(name, template_header, parameters, parameters_open, end, line, &regions_code, &execution_note))
      return;
    if (is_template) {
      templates_.push_back({name, namespace_path, wrapper_name, parameters, max_threads, execution_note});
    }
    std::string code = regions_code;
    const bool has_regions = execution_note.empty();
    std::string why;
    if (!wrapper_code(name, template_header, wrapper_name, call_target, parameters, line, has_regions,
                      max_threads_expression, &code, &why))
      return fail(line, why);
    if (is_template) {
      // Declared only: an instantiation without explicit template arguments finds its wrapper
      // as this function's return type, deduced from the instantiation's parameter types.
      std::string declared;
      for (size_t k = 0; k < parameters.size(); ++k) {
        declared += (k ? ", " : "") + parameters[k].type + (parameters[k].is_array ? "*" : "");
      }
      code += " " + template_header + wrapper_name + "<" + join(names, ", ") + "> " + kDeducerPrefix + name + "(" +
              declared + ");";
    }
    if (!is_template) {
      TranslatedKernel k;
      k.name = host_name.empty() ? name : host_name;
      if (!bind_arguments(parameters, &k, &why)) return fail(line, why);
      k.max_total_threads_per_threadgroup = max_threads;
      k.line = line;
      k.entry_index = static_cast<uint32_t>(kernels_.size());
      code += entry_code(k.entry_index, wrapper_name, line, execution_note);
      if (is(last, "}")) {
        // Only the selected kernel's definition is compiled: an inline function that is never
        // called still instantiates its threadgroup variables' slots, which reserve their bytes
        // in the object whichever kernel declares them (Metal counts each kernel's own).
        edits_.insert(edits_.begin() + static_cast<std::ptrdiff_t>(head_edits),
                      Edit{tokens_[begin].begin, tokens_[begin].begin,
                           "\n#if ETM_CPU_KERNEL_SELECTED(" + std::to_string(k.entry_index) + ")\n#line " +
                               std::to_string(line) + "\n"});
        code += "\n#endif";
      }
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
    // `f<T, Op::g<T>>`: the lexer's `>>` closes both lists.
    const bool closes_two = is(close_angle, ">>");
    if (!is(close_angle, ">") && !closes_two) {
      return deduced_instantiation(begin, end, parameters_open, host_name, max_threads, line);
    }
    size_t open_angle = SIZE_MAX;
    int depth = 0;
    for (size_t j = close_angle + 1; j-- > begin;) {
      if (is(j, ")") || is(j, "]")) {
        j = partner(j);
        continue;
      }
      depth -= angle_change(j);
      if (is(j, "<") && depth == 0) {
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
        text_.substr(tokens_[open_angle + 1].begin, tokens_[close_angle].begin - tokens_[open_angle + 1].begin) +
        (closes_two ? ">" : "");

    const KernelTemplate* found = find_template(base, qualifier);
    if (!found) return fail(line, "instantiation of unknown kernel template '" + base + "'");
    if (host_name.empty()) return fail(line, "kernel instantiation of '" + base + "' needs [[host_name(\"...\")]]");

    // Arguments bind as the primary template's parameters say.
    TranslatedKernel k;
    k.name = host_name;
    std::string why;
    if (!bind_arguments(found->parameters, &k, &why)) return fail(line, why);
    k.max_total_threads_per_threadgroup =
        max_threads ? max_threads : found->max_total_threads_per_threadgroup;
    k.line = line;
    k.entry_index = static_cast<uint32_t>(kernels_.size());
    const std::string target = qualifier + found->wrapper_name + "<" + arguments + ">";
    const std::string code = entry_code(k.entry_index, target, line, found->execution_note);
    if (!add_kernel(std::move(k), line)) return;
    // The instantiation itself goes: the entry point instantiates what it needs.
    erase(begin, end - 1);
    insert_after(end - 1, "\n" + code + "\n#line " + std::to_string(tokens_[end - 1].line) + "\n");
  }

  // The kernel template `name` an instantiation qualified by `qualifier` ("a::b::", "::" or "")
  // means: the last declared whose namespace path ends with the qualifier, else the first of
  // that name; null if none.
  const KernelTemplate* find_template(const std::string& name, const std::string& qualifier) const {
    const KernelTemplate* found = nullptr;
    for (const KernelTemplate& t : templates_) {
      if (t.name != name) continue;
      if (!found || ends_with_path(t.namespace_path, qualifier)) found = &t;
    }
    return found;
  }

  // `template [[host_name("k")]] [[kernel]] void f(const device float* x, ...);`: the template
  // arguments are deduced by the compiler from the parameter types (etm__deduce_f).
  void deduced_instantiation(size_t begin, size_t end, size_t parameters_open, const std::string& host_name,
                             uint32_t max_threads, int line) {
    if (parameters_open == SIZE_MAX || partner(parameters_open) == SIZE_MAX || !is_identifier(parameters_open - 1)) {
      return fail(line, "cannot parse the kernel instantiation");
    }
    const std::string base = spell(parameters_open - 1);
    std::string qualifier;
    for (size_t j = parameters_open - 1; j > begin + 1 && is(j - 1, "::") && is_identifier(j - 2); j -= 2) {
      qualifier = spell(j - 2) + "::" + qualifier;
    }
    const KernelTemplate* found = find_template(base, qualifier);
    if (!found) return fail(line, "instantiation of unknown kernel template '" + base + "'");
    if (host_name.empty()) return fail(line, "kernel instantiation of '" + base + "' needs [[host_name(\"...\")]]");
    std::vector<Parameter> parameters;
    if (!parse_parameters(parameters_open, &parameters, line)) return;
    if (parameters.size() != found->parameters.size()) {
      return fail(line, "the instantiation of kernel template '" + base + "' has " + std::to_string(parameters.size()) +
                            " parameters, the template " + std::to_string(found->parameters.size()));
    }
    std::string arguments;
    for (size_t k = 0; k < parameters.size(); ++k) {
      arguments += std::string(k ? ", " : "") + "std::declval<" + parameters[k].type +
                   (parameters[k].is_array ? "*" : "") + ">()";
    }
    TranslatedKernel k;
    k.name = host_name;
    std::string why;
    if (!bind_arguments(found->parameters, &k, &why)) return fail(line, why);
    k.max_total_threads_per_threadgroup = max_threads ? max_threads : found->max_total_threads_per_threadgroup;
    k.line = line;
    k.entry_index = static_cast<uint32_t>(kernels_.size());
    const std::string target = "decltype(" + qualifier + kDeducerPrefix + base + "(" + arguments + "))";
    const std::string code = entry_code(k.entry_index, target, line, found->execution_note);
    if (!add_kernel(std::move(k), line)) return;
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
        depth += angle_change(item_end);
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
        if (is(k, "(") && partner(k) != SIZE_MAX) {
          // `T (*Reduce)(T, T)`: the parenthesised declarator names the parameter; the
          // parameter list after it names nothing.
          if ((is(k + 1, "*") || is(k + 1, "&")) && is_identifier(k + 2)) name = spell(k + 2);
          k = partner(k);
          continue;
        }
        if (is(k, "...")) pack = true;
        if (is_identifier(k)) name = spell(k);
      }
      if (name.empty() || name == "typename" || name == "class") return false;
      names->push_back(pack ? name + "..." : name);
      // Skip a default (`= Transform<T, U>`: commas inside its brackets are its own).
      for (int nesting = 0; item_end < close && !(nesting <= 0 && is(item_end, ",")); ++item_end) {
        if ((is(item_end, "(") || is(item_end, "[")) && partner(item_end) != SIZE_MAX) item_end = partner(item_end);
        nesting += angle_change(item_end);
      }
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
        angle += angle_change(j);
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
        if (before_declarator && parameter.address_space.empty() &&
            (is(t, "device") || is(t, "constant") || is(t, "threadgroup") || is(t, "thread"))) {
          parameter.address_space = spell(t);
        }
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

  // The kernel's barrier-region function (msl_barrier_regions.h) into *code, or in *note why it
  // runs on fibers (or as a plain loop) instead.
  bool region_form(const std::string& name, const std::string& template_header,
                   const std::vector<Parameter>& parameters,
                   size_t parameters_open, size_t end, int line, std::string* code, std::string* note) {
    size_t body = partner(parameters_open) + 1;
    while (body < end && !is(body, "{") && !is(body, ";")) ++body;
    if (!is(body, "{") || partner(body) == SIZE_MAX) {
      *note = "no kernel body";
      return true;
    }
    TranslatedKernel probe;
    probe.name = name;
    std::string why;
    if (!bind_arguments(parameters, &probe, &why)) {
      fail(line, why);
      return false;
    }
    RegionKernelSource source;
    source.text = &text_;
    source.tokens = &tokens_;
    source.partner = &partner_;
    source.body_open = body;
    source.body_close = partner(body);
    source.function_name = kRegionPrefix + name;
    source.template_header = template_header;
    source.suffix_float_literals = options_.suffix_float_literals;
    source.threadgroup_slots = &threadgroup_slots_;
    for (size_t k = 0; k < parameters.size(); ++k) {
      const Parameter& p = parameters[k];
      const KernelArgument& a = probe.arguments[k];
      RegionParameter r;
      r.name = p.name;
      if (a.kind == KernelArgumentKind::thread_attribute) {
        r.is_attribute = true;
        r.attribute_type = p.type;
        r.per_thread = is_per_thread_attribute(a.attribute);
        if (!attribute_value(p, *find_thread_attribute(a.attribute), &r.attribute_value, &why)) {
          fail(line, why);
          return false;
        }
      } else {
        r.declaration = p.type + (p.is_array ? "* " : " ") + p.name;
      }
      source.parameters.push_back(std::move(r));
    }
    if (!barrier_region_function(source, synchronising_, code, note)) code->clear();
    return true;
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
        angle += angle_change(j);
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
      threadgroup_slots_[i] = code;
      const size_t b = tokens_[i].begin, e = tokens_[semicolon].end;
      code.append(static_cast<size_t>(std::count(text_.begin() + b, text_.begin() + e, '\n')), '\n');
      edits_.push_back({b, e, code});
      i = semicolon;
    }
  }

  const std::string& text_;
  const std::vector<Token>& tokens_;
  MslTranslationOptions options_;
  std::vector<size_t> partner_;
  std::vector<Edit> edits_;
  std::vector<TranslatedKernel> kernels_;
  std::vector<KernelTemplate> templates_;
  std::set<std::string> declared_kernels_;
  SynchronisingFunctions synchronising_;
  unsigned next_threadgroup_site_ = 0;
  std::map<size_t, std::string> threadgroup_slots_;  // declaration's first token -> its arena references
  std::string error_;
};


// Tokens of `text`, the output of a stage whose input had `tokens`: lexed again only when the
// stage changed the text.
Status retokenize(const std::string& input, const std::string& text, std::vector<Token>* tokens) {
  if (text == input) return Status();
  tokens->clear();
  std::string error;
  if (!lex_msl(text, tokens, &error)) return Status::error(std::string(kMslSourceName) + ":" + error);
  return Status();
}

}  // namespace

Status translate_msl(const std::string& msl, const MslTranslationOptions& options,
                     MslTranslation* out) {
  std::vector<Token> tokens;
  std::string error;
  if (!lex_msl(msl, &tokens, &error)) return Status::error(std::string(kMslSourceName) + ":" + error);
  std::string preprocessed;
  Status status = preprocess_msl(msl, tokens, kCpuMetalVersion, &preprocessed);
  if (!status.ok()) return status;
  status = retokenize(msl, preprocessed, &tokens);
  if (!status.ok()) return status;
  const std::string folded = rewrite_overload_sets(preprocessed, tokens);
  status = retokenize(preprocessed, folded, &tokens);
  if (!status.ok()) return status;
  std::string specializable;
  std::vector<FunctionConstant> constants;
  status = rewrite_function_constants(folded, tokens, &specializable, &constants);
  if (!status.ok()) return status;
  status = retokenize(folded, specializable, &tokens);
  if (!status.ok()) return status;
  status = Translator(specializable, tokens, options).run(out);
  if (!status.ok()) return status;
  out->source = function_constant_defaults(constants) + out->source;
  out->function_constants = std::move(constants);
  return Status();
}

const std::string& msl_translator_identity() {
  static const std::string identity = [] {
    std::string all;
    for (size_t i = 0; i < kEmbeddedTranslatorSources_count; ++i) {
      all.append(kEmbeddedTranslatorSources[i].contents, kEmbeddedTranslatorSources[i].size);
      all += '\0';
    }
    return "etm-msl-translator-" + content_hash(all);
  }();
  return identity;
}

}  // namespace etm::device::cpu
