#!/usr/bin/env bash
# Runs the multi-threaded C++ host (tests/threads_host.cpp) against a build of libetmetal
# with ThreadSanitizer (build-tsan/), on every CPU-device execution path that runs barrier
# kernels (fibers, barrier regions, and the per-kernel choice). The host is instrumented
# too; kernels the CPU device compiles at run time are not (their races are issue 15's
# kernel sanitizer's business). A TSan-instrumented libetmetal cannot be preloaded into
# Python here (the interpreter crashes under a preloaded libtsan), hence a C++ host. Any
# report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build-tsan ] || meson setup build-tsan -Db_sanitize=thread -Db_lundef=false \
  -Dbuildtype=debugoptimized >/dev/null
ninja -C build-tsan
host=build-tsan/threads_host
g++ -std=c++17 -g -O1 -fsanitize=thread -Inative/include tests/threads_host.cpp \
  -Lbuild-tsan/native -letmetal -Wl,-rpath,"$PWD/build-tsan/native" -pthread -o "$host"
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
for path in fibers regions ""; do
  echo "threads_host, ETMETAL_CPU_EXECUTION=${path:-<per kernel>}"
  ETMETAL_DEVICE=cpu ETMETAL_CPU_EXECUTION="$path" "$host"
done
