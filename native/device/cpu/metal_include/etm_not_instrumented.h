// The attributes of the functions the kernels' access instrumentation must leave alone (its
// hooks and what they run). g++ instruments kernels with -fsanitize=thread's hooks and clang
// with -fsanitize=kernel-address's (dispatch_counters.cpp), so both sanitizers are named. Here,
// not in kernel_support, because the emulated headers use it too and are also compiled without
// kernel_support (tests/metal_stdlib).
#pragma once

#define ETM_CPU_NOT_INSTRUMENTED no_sanitize_address, no_sanitize_thread
