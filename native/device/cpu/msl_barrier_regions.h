// Barrier regions: a second form of a kernel that runs a whole threadgroup in one call
// without fibers, for the common structured case (as POCL and MCUDA do for OpenCL/CUDA).
// The statements between barriers become loops over the threads of the group; declarations
// at the levels that contain a barrier move into per-thread frames; loops, ifs and blocks
// around barriers stay as they are and run once for the group (Metal requires a barrier to be
// reached by all threads, so their conditions are uniform); a `return` marks the thread done
// for the regions after it; simdgroup_load / store / multiply(_accumulate) run once per
// simdgroup on the lanes' frames (etm_barrier_regions.h). Anything else that synchronises
// (simd_* collectives, helpers with barriers, barriers under conditions on per-thread values,
// goto, lambdas ...) keeps the kernel on the fiber path, with the reason.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "device/cpu/msl_lexer.h"

namespace etm::device::cpu {

// A kernel parameter as the region function sees it.
struct RegionParameter {
  std::string name;
  // Buffers and threadgroup memory: the parameter declaration (`const device float* a`).
  std::string declaration;
  // Thread attributes: the spelled type and the value's expression over the wrapper's locals
  // (etm__x/y/z, etm__index, etm__group, etm__launch); per_thread when threads differ in it.
  bool is_attribute = false;
  std::string attribute;  // its MSL name (thread_index_in_simdgroup ...)
  std::string attribute_type;
  std::string attribute_value;
  bool per_thread = false;
};

struct RegionKernelSource {
  const std::string* text = nullptr;
  const std::vector<Token>* tokens = nullptr;
  const std::vector<size_t>* partner = nullptr;  // matching bracket of each bracket token
  size_t body_open = 0;                           // the kernel body's `{` and `}`
  size_t body_close = 0;
  std::string function_name;    // of the generated function
  std::string template_header;  // "template <...> " or empty
  std::vector<RegionParameter> parameters;
  bool suffix_float_literals = false;
  // The thread form's arena references for each `threadgroup` declaration (by its first token),
  // which the region form uses instead of locals when built with access checks (they check the
  // arena's bytes only).
  const std::map<size_t, std::string>* threadgroup_slots = nullptr;
};

// The execution note of a kernel without barriers or SIMD-group calls (it runs as loops).
inline constexpr char kNoSynchronisation[] = "no barrier or SIMD-group call";

// Whether a thread attribute differs between the threads of one group.
bool is_per_thread_attribute(const std::string& attribute);

// The functions defined in the source whose bodies synchronise (barriers, SIMD-group
// functions, or calls to such functions); among them, those without parameters whose body is
// nothing but threadgroup barriers (`void sync() { threadgroup_barrier(...); }`): a call to one
// is a barrier to the region form.
struct SynchronisingFunctions {
  std::set<std::string> all;
  std::set<std::string> barriers_only;
  // The source defines c10::metal's simd and threadgroup reduction helpers exactly as the
  // region form re-expresses them (etm_barrier_regions.h; torch 2.13's reduction_utils.h).
  bool c10_reductions_known = false;
};
SynchronisingFunctions synchronising_functions(const std::string& text, const std::vector<Token>& tokens,
                                               const std::vector<size_t>& partner);

// Writes the region form of the kernel to *code:
//   template_header inline int function_name(<buffer and threadgroup parameters>,
//                                            const etm_cpu_launch*, const etm_cpu_group*)
// (returns 0, or 1 without running anything when the group's frames are too large), or
// returns false with *reason saying why the kernel stays on fibers.
bool barrier_region_function(const RegionKernelSource& source, const SynchronisingFunctions& synchronising,
                             std::string* code, std::string* reason);

}  // namespace etm::device::cpu
