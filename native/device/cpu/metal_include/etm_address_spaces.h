// Metal's address-space and function qualifiers, which have no meaning on the CPU.
//
// Defined last, after every system header: libstdc++ uses the identifier `thread`.
// `constant` expands to nothing here. The MSL translator rewrites `constant` in the source it
// translates to `const` (or drops it where a `const` is already in the declaration), which
// keeps `constant void*` and `device void*` overloads apart; a macro cannot do that, because
// `constant const char*` (c10's error.h) would become a duplicate `const`.
#pragma once

#define device
#define constant
#define thread
#define threadgroup
#define threadgroup_imageblock
#define ray_data
#define object_data
#define kernel
// Memory coherence qualifiers (`coherent(device)`): one coherent memory on the CPU.
#define coherent(scope)
