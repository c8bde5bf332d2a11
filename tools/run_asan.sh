#!/usr/bin/env bash
# Runs the test suite (the default run unless pytest arguments say otherwise) against a
# build of libetmetal with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/).
# Python itself is not instrumented, so the sanitizer runtimes are preloaded (with libstdc++
# first in line, or ASan cannot intercept C++ exceptions). Leak detection is off: the
# interpreter's own allocations would drown the report. Any report aborts the test process
# and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
  -Dbuildtype=debug >/dev/null
ninja -C build-asan
export ETMETAL_LIBRARY="$PWD/build-asan/native/libetmetal.so"
export ETMETAL_EXECUTORCH_LIBRARY="$PWD/build-asan/native/executorch/libetmetal_executorch.so"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so) $(gcc -print-file-name=libstdc++.so)"
# Reports go to files: pytest captures the test's stderr, and an aborting process loses it.
reports="$PWD/build-asan/reports"
rm -rf "$reports" && mkdir -p "$reports"
# handle_sigfpe=0: a test checks that a SIGFPE raised outside kernels keeps its default action
# (the CPU device handles it only inside kernel code); ASan's own handler would report it.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:handle_sigfpe=0:log_path=$reports/asan"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$reports/ubsan"
# These tests load a model with RTLD_DEEPBIND on purpose (it must bind to libetmetal even when
# the global scope already holds another provider of the ABI); the ASan runtime refuses
# deep-bound libraries (google/sanitizers#611), so they cannot run here.
deep_bound=(
  "tests/aoti/test_loader.py::test_a_model_binds_to_libetmetal_even_when_another_library_provides_the_abi"
  "tests/aoti/test_coexistence.py::test_c_host_with_libtorch_global_and_libetmetal_local"
  "tests/executorch_integration/test_model_binding.py"
)
status=0
python3 -m pytest "${deep_bound[@]/#/--deselect=}" "$@" || status=$?
if compgen -G "$reports/*" >/dev/null; then
  cat "$reports"/*
  exit 1
fi
exit $status
