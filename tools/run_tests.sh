#!/usr/bin/env bash
# Sets up a fresh machine and runs the test suite: Python dependencies, a development build
# of libetmetal in build/, then pytest (the default run; `-m slow` adds the long suites).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet torch==2.13.0 numpy cffi meson meson-python ninja pytest
# The etmetal[executorch] extra: the ExecuTorch tests and libetmetal_executorch need it.
python3 -m pip install --quiet executorch==1.5.1
if [ -d build ]; then
  meson setup build --reconfigure >/dev/null
else
  meson setup build >/dev/null
fi
ninja -C build
python3 -m pytest "$@"
