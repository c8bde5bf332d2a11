#!/usr/bin/env bash
# Runs the test suite against an AddressSanitizer build of libetmetal (build-asan/).
# Python itself is not instrumented, so the sanitizer runtime is preloaded (with libstdc++
# first in line, or ASan cannot intercept C++ exceptions). Leak detection is off: the
# interpreter's own allocations would drown the report. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address -Dbuildtype=debug >/dev/null
ninja -C build-asan
export ETMETAL_LIBRARY="$PWD/build-asan/native/libetmetal.so"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
python3 -m pytest "$@"
