// The Metal Shading Language standard library for compute kernels, emulated in C++ for the CPU
// device. A translated kernel starts with `#include <metal_stdlib>`; every public <metal_*>
// header includes this file, so all system headers are in before the address-space macros.
//
// Layout of the library:
//   etm_base.h               predefined macros, system headers, scalar types, float constants
//   etm_bfloat.h             bfloat (a class, round-to-nearest-even), `h` / `bf` literals
//   etm_vector.h             vector types with swizzle members, operators, all/any/select
//   etm_matrix.h             float/half matrices (floatCxR): construction, columns, products
//   etm_traits.h             metal:: type traits, numeric_limits, uniform<T>
//   etm_as_type.h            as_type<T>
//   etm_array.h              metal::array
//   etm_math.h               math, common, geometric and relational functions (+ fast::, precise::)
//   etm_integer.h            integer functions
//   etm_sync.h               mem_flags, barriers, the call-site identity of collectives
//   etm_atomic.h             atomics (GCC __atomic builtins: atomic across host threads)
//   etm_simd.h               simd_* and quad_* collectives over etm_cpu_simd_exchange
//   etm_simdgroup_matrix.h   8x8 simdgroup matrices (2 elements per lane)
//   etm_barrier_regions.h    simdgroup matrix operations of the barrier-region form
//   etm_logging.h            os_log (to standard error)
//   etm_compiler_builtins.h  __metal_* builtins some MSL code calls directly
//   etm_address_spaces.h     device, constant, thread, threadgroup ... as empty macros
// Internal names live in namespaces etm_msl (helpers) and etm_vec (the vector classes and
// their operators only, since argument-dependent lookup searches it); namespace metal holds
// Metal's names only, because MSL code brings it into the global namespace.
//
// Where it differs from Apple's library (each is a compile error, never a silent difference,
// unless noted):
//   - Brace initializers with more components than the vector has are not rejected: the
//     extra ones are ignored. Silent.
//   - No 4-component swizzles with a repeated component (v.xxxx), no swizzle of a swizzle
//     (v.xyz.xy); a swizzle's operator[] returns a value.
//   - Matrix types are float and half only, without determinant(); no textures, samplers
//     or imageblocks.
//   - `constant` expands to nothing; the translator rewrites it in the MSL it translates.
//   - simd_vote is 16 bytes (it keeps the active mask for all()).
//   - In C++17 mode two collectives on one source line share a call site.
//   - bfloat is a class: `cond ? bfloat_value : float_value` is ambiguous in C++, so the
//     translator casts the operands of conditionals (msl_conditionals.h); headers outside the
//     translated source get no such help. A bfloat converts implicitly only to float:
//     `int i = bf;` needs `int(bf)`.
//   - Math is at least as accurate as Metal's precise math; fast:: is the same code.
#pragma once

#include "etm_base.h"
#include "etm_bfloat.h"
#include "etm_vector.h"
#include "etm_matrix.h"
#include "etm_traits.h"
#include "etm_as_type.h"
#include "etm_array.h"
#include "etm_math.h"
#include "etm_integer.h"
#include "etm_sync.h"
#include "etm_atomic.h"
#include "etm_simd.h"
#include "etm_simdgroup_matrix.h"
#include "etm_barrier_regions.h"
#include "etm_logging.h"
#include "etm_compiler_builtins.h"
#include "etm_address_spaces.h"
