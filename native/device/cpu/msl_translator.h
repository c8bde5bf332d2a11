// Translates Metal Shading Language compute source into one C++ translation unit for the
// CPU device. Kernel signatures are parsed and bound to the executor's entry-point ABI
// (kernel_support/etm_cpu_kernel_abi.h); everything else stays MSL text that compiles
// through the emulated Metal headers. Line numbers of the output match the MSL source
// (`#line`), so compiler diagnostics point at MSL lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cpu/msl_function_constants.h"
#include "device/device.h"

namespace etm::device::cpu {

// A hash of the translator's own sources: changes whenever the generated code can change,
// so cached translations and kernel objects are rebuilt.
const std::string& msl_translator_identity();

// The file name compiler diagnostics report for MSL lines.
inline constexpr const char* kMslSourceName = "library.metal";

enum class KernelArgumentKind {
  buffer,              // [[buffer(n)]] or positional: a pointer or reference into memory
  threadgroup_memory,  // [[threadgroup(n)]]: dynamic threadgroup memory
  thread_attribute,    // thread_position_in_grid and the other compute-stage values
};

struct KernelArgument {
  std::string name;
  KernelArgumentKind kind = KernelArgumentKind::buffer;
  uint32_t index = 0;         // buffer or threadgroup index
  bool by_reference = false;  // `constant T& x`: reads sizeof(T) bytes at the bound address
  bool writable = true;       // false for `constant` and `const device` buffers
  bool optional = false;      // [[function_constant(c)]]: exists only when c is true; may stay unbound
  std::string attribute;      // for thread_attribute
  std::string type;           // as the C++ translation spells it (`const float*`)
  std::string address_space;  // as written: device, constant, threadgroup, thread or empty
};

struct TranslatedKernel {
  std::string name;  // the host name new_pipeline looks up
  uint32_t entry_index = 0;
  uint32_t max_total_threads_per_threadgroup = 0;  // 0: not declared
  int line = 0;
  std::vector<KernelArgument> arguments;
  // Why the kernel has no barrier-region form (it runs as loops or on fibers); empty when it has one.
  std::string execution_note;
};

struct MslTranslation {
  std::string source;  // the C++ translation unit
  std::vector<TranslatedKernel> kernels;
  std::vector<FunctionConstant> function_constants;
};

struct MslTranslationOptions {
  // Appends `f` to unsuffixed floating literals of the MSL text (MSL literals are float).
  // For compilers without g++'s -fsingle-precision-constant.
  bool suffix_float_literals = false;
};

Status translate_msl(const std::string& msl, const MslTranslationOptions& options,
                     MslTranslation* out);

}  // namespace etm::device::cpu
