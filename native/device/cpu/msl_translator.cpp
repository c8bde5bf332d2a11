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
#include <utility>

#include "device/cpu/embedded_headers.h"
#include "device/cpu/kernel_compiler.h"
#include "device/cpu/msl_conditionals.h"
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

// The compute-stage attributes a parameter may carry; each is a tag type of the same name in
// kernel_support/etm_cpu_kernel_wrapper.h that computes its value.
const std::set<std::string> kThreadAttributes = {
    "thread_position_in_grid",        "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",   "threads_per_threadgroup",
    "dispatch_threads_per_threadgroup", "threads_per_grid",
    "threadgroups_per_grid",          "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",      "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup",     "dispatch_simdgroups_per_threadgroup",
    "threads_per_simdgroup",          "thread_execution_width",
    "thread_index_in_quadgroup",      "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup",     "dispatch_quadgroups_per_threadgroup",
};

bool is_thread_attribute(const std::string& name) { return kThreadAttributes.count(name) != 0; }

// Names the barrier-region form of kernel f: etm__regions_f.
constexpr const char* kRegionPrefix = "etm__regions_";
// Names the function whose return type is the wrapper of template kernel f: etm__deduce_f.
constexpr const char* kDeducerPrefix = "etm__deduce_";

// Standard C++ attributes survive; every other [[...]] is MSL's and is removed.
bool is_standard_attribute(const std::string& name) {
  static const std::set<std::string> kStandard = {
      "maybe_unused", "nodiscard", "likely", "unlikely", "fallthrough", "noreturn",
      "deprecated",   "gnu",       "clang",  "carries_dependency", "no_unique_address"};
  return kStandard.count(name) != 0;
}

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
      if (a.name == "buffer" || a.name == "threadgroup" || is_thread_attribute(a.name)) {
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

// Whether a thread-attribute parameter's spelled type is one the attribute can initialize:
// an integer scalar or a vector of up to 3 of them (uint, ushort2, metal::uint3 ...).
bool check_attribute_type(const Parameter& p, const std::string& attribute, std::string* error) {
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
  std::string scalar = base;
  if (!base.empty() && base.back() >= '2' && base.back() <= '3') scalar = base.substr(0, base.size() - 1);
  static const std::set<std::string> kScalars = {"uint", "ushort", "int", "short", "uint32_t", "uint16_t", "ulong", "long", "size_t"};
  if (!kScalars.count(scalar) || p.is_pointer || p.is_reference) {
    *error = "parameter '" + p.name + "' [[" + attribute + "]] has unsupported type '" + p.type + "'";
    return false;
  }
  return true;
}

// The value of a thread-attribute parameter inside a region function, whose locals name the
// thread (etm__x/y/z, etm__index) only where the attribute differs between threads.
std::string region_attribute_value(const Parameter& p, const std::string& attribute, bool per_thread) {
  return "etm_cpu_kernel::attribute_value<" + p.type + ", etm_cpu_kernel::" + attribute +
         ">(etm__launch, etm__group, " + (per_thread ? "{etm__x, etm__y, etm__z, etm__index}" : "{}") + ")";
}

// The kernel's parameter types as the C++ function sees them.
std::string parameter_types(const std::vector<Parameter>& parameters) {
  std::string types;
  for (size_t k = 0; k < parameters.size(); ++k) {
    types += (k ? ", " : "") + parameters[k].type + (parameters[k].is_array ? "*" : "");
  }
  return types;
}

// The kernel's wrapper: an alias of etm_cpu_kernel::kernel_wrapper (etm_cpu_kernel_wrapper.h)
// naming the kernel, its region form, its computed thread limit and each parameter's binding.
bool wrapper_code(const std::string& kernel_name, const std::string& template_header,
                  const std::string& wrapper_name, const std::string& call_target,
                  const std::vector<Parameter>& parameters, int line, bool has_regions,
                  const std::string& max_threads_expression, std::string* out, std::string* error) {
  TranslatedKernel probe;
  probe.name = kernel_name;
  if (!bind_arguments(parameters, &probe, error)) return false;
  std::string bindings;
  for (size_t k = 0; k < parameters.size(); ++k) {
    const KernelArgument& a = probe.arguments[k];
    switch (a.kind) {
      case KernelArgumentKind::buffer:
        bindings += ", etm_cpu_kernel::buffer<" + std::to_string(a.index) + ">";
        break;
      case KernelArgumentKind::threadgroup_memory:
        bindings += ", etm_cpu_kernel::threadgroup_memory<" + std::to_string(a.index) + ">";
        break;
      case KernelArgumentKind::thread_attribute:
        if (!check_attribute_type(parameters[k], a.attribute, error)) return false;
        bindings += ", etm_cpu_kernel::" + a.attribute;
        break;
    }
  }
  *out += "#line " + std::to_string(line) + "\n" + template_header + "using " + wrapper_name +
          " = etm_cpu_kernel::kernel_wrapper<static_cast<void (*)(" + parameter_types(parameters) + ")>(&" +
          call_target + "), " + (has_regions ? "ETM_CPU_REGIONS(&" + std::string(kRegionPrefix) + call_target + ")" : "nullptr") +
          ", " +
          (max_threads_expression.empty() ? "etm_cpu_kernel::no_max_threads"
                                          : "etm_cpu_kernel::max_threads<(" + max_threads_expression + ")>") +
          bindings + ">;";
  return true;
}

// The extern "C" entry points of kernel `index` (etm_cpu_kernel_abi.h) for the wrapper `target`.
std::string entry_code(uint32_t index, const std::string& target, int line,
                       const std::string& execution_note) {
  const std::string n = std::to_string(index);
  std::string note;
  for (char c : execution_note.empty() ? std::string("barrier regions") : execution_note) {
    if (c == '"' || c == '\\') note += '\\';
    if (c != '\n') note += c;
  }
  std::string code = "\n#if ETM_CPU_KERNEL_SELECTED(" + n + ")\n#line " + std::to_string(line) +
                     "\nETM_CPU_KERNEL_ENTRY_POINTS(" + n + ", \"" + note + "\", " + target + ")";
  if (execution_note.empty()) code += "\nETM_CPU_KERNEL_REGIONS_ENTRY(" + n + ", " + target + ")";
  return code + "\n#endif";
}

class Translator {
 public:
  Translator(const std::string& text, const std::vector<Token>& tokens, const MslTranslationOptions& options)
      : text_(text), tokens_(tokens), options_(options) {}

  Status run(MslTranslation* out) {
    partner_ = pair_brackets(text_, tokens_);
    synchronising_ = synchronising_functions(text_, tokens_, partner_);
    strip_attributes_and_constant();
    scan_scope(0, tokens_.size(), {});
    if (!error_.empty()) return Status::error(error_);
    if (options_.suffix_float_literals) suffix_float_literals();

    // Stable: insertions at one place keep the order they were made in.
    std::stable_sort(edits_.begin(), edits_.end(), [](const TextEdit& a, const TextEdit& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::string body, unused;
    apply_edits(text_, tokens_, edits_, &body, nullptr, &unused);

    // Apple's predefined macros come first, as the preprocessor stage assumed them.
    std::string prelude;
    for (const auto& [name, value] : predefined_metal_macros(kCpuMetalVersion)) {
      prelude += "#define " + name + " " + value + "\n";
    }
    // The compiler driver builds one kernel (ETM_CPU_KERNEL_INDEX) or, to check the library,
    // all (ETM_CPU_ALL_KERNELS); the test lives here, after the precompiled prelude, which
    // must not name either macro.
    out->source = prelude +
                  "#include \"etm_cpu_prelude.h\"\n"
                  "#define ETM_CPU_KERNEL_SELECTED(index) (ETM_CPU_ALL_KERNELS || ETM_CPU_KERNEL_INDEX == (index))\n"
                  "#line 1 \"" +
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
        edits_.push_back({tokens_[i].begin, tokens_[i].end, const_beside(text_, tokens_, i) ? "" : "const"});
      }
    }
  }

  // Tokens [first, last) as written, `constant` turned into `const` as in the translated source
  // (`float2 (*f)(constant T*, uint2)` template parameters must match the functions they name).
  std::string text_with_constant_as_const(size_t first, size_t last) const {
    std::string out;
    size_t copied = tokens_[first].begin;
    for (size_t k = first; k < last; ++k) {
      if (!is(k, "constant")) continue;
      out += text_.substr(copied, tokens_[k].begin - copied) + (const_beside(text_, tokens_, k) ? "" : "const");
      copied = tokens_[k].end;
    }
    return out + text_.substr(copied, tokens_[last - 1].end - copied);
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
      template_header = "template " + text_with_constant_as_const(begin + 1, template_close + 1) + " ";
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
      code += " " + template_header + wrapper_name + "<" + join(names, ", ") + "> " + kDeducerPrefix + name + "(" +
              parameter_types(parameters) + ");";
    }
    if (!is_template) {
      TranslatedKernel k;
      k.name = host_name.empty() ? name : host_name;
      if (!bind_arguments(parameters, &k, &why)) return fail(line, why);
      k.max_total_threads_per_threadgroup = max_threads;
      k.line = line;
      k.entry_index = static_cast<uint32_t>(kernels_.size());
      k.execution_note = execution_note;
      code += entry_code(k.entry_index, wrapper_name, line, execution_note);
      if (is(last, "}")) {
        // Only the selected kernel's definition is compiled: an inline function that is never
        // called still instantiates its threadgroup variables' slots, which reserve their bytes
        // in the object whichever kernel declares them (Metal counts each kernel's own).
        edits_.insert(edits_.begin() + static_cast<std::ptrdiff_t>(head_edits),
                      TextEdit{tokens_[begin].begin, tokens_[begin].begin,
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
    k.execution_note = found->execution_note;
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
    k.execution_note = found->execution_note;
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
          parameter.type += const_beside(text_, tokens_, t) ? "" : "const ";
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
        r.attribute = a.attribute;
        r.attribute_type = p.type;
        r.per_thread = is_per_thread_attribute(a.attribute);
        if (!check_attribute_type(p, a.attribute, &why)) {
          fail(line, why);
          return false;
        }
        r.attribute_value = region_attribute_value(p, a.attribute, r.per_thread);
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
  std::vector<TextEdit> edits_;
  std::vector<TranslatedKernel> kernels_;
  std::vector<KernelTemplate> templates_;
  std::set<std::string> declared_kernels_;
  SynchronisingFunctions synchronising_;
  unsigned next_threadgroup_site_ = 0;
  std::map<size_t, std::string> threadgroup_slots_;  // declaration's first token -> its arena references
  std::string error_;
};


}  // namespace

Status translate_msl(const std::string& msl, const MslTranslationOptions& options,
                     MslTranslation* out) {
  std::vector<Token> tokens;
  std::string error;
  if (!lex_msl(msl, &tokens, &error)) return Status::error(std::string(kMslSourceName) + ":" + error);
  // One lexer pass: each stage hands the next the tokens of its output (apply_edits).
  std::string preprocessed, folded, specializable;
  std::vector<Token> preprocessed_tokens, folded_tokens, specializable_tokens;
  Status status = preprocess_msl(msl, tokens, kCpuMetalVersion, &preprocessed, &preprocessed_tokens);
  if (!status.ok()) return status;
  status = rewrite_overload_sets(preprocessed, preprocessed_tokens, &folded, &folded_tokens);
  if (!status.ok()) return status;
  // The bfloat conditional rewrite (sources naming bfloat only) renders nested conditionals as
  // a whole, so its output is lexed again where it changed anything.
  std::string selected = rewrite_bfloat_conditionals(folded, folded_tokens);
  std::vector<Token> selected_tokens;
  if (selected == folded) {
    selected_tokens = std::move(folded_tokens);
  } else if (!lex_msl(selected, &selected_tokens, &error)) {
    return Status::error(std::string(kMslSourceName) + ":" + error);
  }
  std::vector<FunctionConstant> constants;
  status = rewrite_function_constants(selected, selected_tokens, &specializable, &constants, &specializable_tokens);
  if (!status.ok()) return status;
  status = Translator(specializable, specializable_tokens, options).run(out);
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
