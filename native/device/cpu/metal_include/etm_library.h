// The whole emulated Metal standard library. Every public <metal_*> header includes this, so
// that all system headers are included before the address-space macros are defined.
#pragma once

#include "etm_base.h"
#include "etm_bfloat.h"
#include "etm_vector.h"
#include "etm_traits.h"
#include "etm_as_type.h"
#include "etm_array.h"
#include "etm_math.h"
#include "etm_integer.h"
#include "etm_sync.h"
#include "etm_atomic.h"
#include "etm_simd.h"
#include "etm_simdgroup_matrix.h"
#include "etm_logging.h"
#include "etm_compiler_builtins.h"
#include "etm_address_spaces.h"
