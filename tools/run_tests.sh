#!/usr/bin/env bash
# Sets up a fresh machine and runs the test suite: Python dependencies, a development build
# of libetmetal in build/, then pytest (the default run; `-m slow` adds the long suites).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet torch==2.13.0 numpy cffi meson meson-python ninja pytest pytest-xdist
# The etmetal[executorch] extra: the ExecuTorch tests and libetmetal_executorch need it.
python3 -m pip install --quiet executorch==1.5.1
if [ -d build ]; then
  meson setup build --reconfigure >/dev/null
else
  meson setup build >/dev/null
fi
ninja -C build
# One pytest worker per core, each taking whole files (a file's compiled packages and kernels
# stay with one worker): most of the run is single-threaded compiling.
python3 -m pytest -n auto --dist loadfile "$@"
