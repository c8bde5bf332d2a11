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
# ExecuTorch's export leaves custom-op state behind that makes a later etmetal compile in the
# same process miss the metal:: C shims (a known bug, see the closing note of 2026-12-01): its
# tests run in a process of their own until that is fixed.
python3 -m pytest --ignore=tests/executorch_integration "$@"
python3 -m pytest tests/executorch_integration "$@"
