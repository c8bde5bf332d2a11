"""Graph workloads (MPSGraph on Metal) in the runtime's stream: one command of the commit
policy like a dispatch, ending the compute encoder so that no barrier follows, refusals as
errors that count nothing. tests/stream_graphs_host.cpp drives native/runtime/stream.cpp over
a recording device, linked from the objects of this checkout's build/ (the device runs
nowhere else on Linux: the CPU device runs no graphs)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# meson keeps a target's objects in "<target file name>.p".
OBJECTS = ROOT / "build" / "native" / (
    "libetmetal.dylib.p" if sys.platform == "darwin" else "libetmetal.so.p")
RUNTIME_OBJECTS = ["runtime_stream.cpp.o", "runtime_library.cpp.o", "runtime_trace.cpp.o",
                   "runtime_error.cpp.o", "runtime_write_order.cpp.o",
                   "runtime_commit_policy.cpp.o", "device_settings.cpp.o"]


def test_graphs_share_the_kernels_commit_policy_and_hazards(tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert compiler, "no C++ compiler"
    objects = [OBJECTS / name for name in RUNTIME_OBJECTS]
    missing = [str(path) for path in objects if not path.exists()]
    assert not missing, f"build libetmetal first (meson setup build && ninja -C build): {missing}"
    binary = tmp_path / "stream_graphs_host"
    subprocess.run([compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "native"),
                    str(ROOT / "tests" / "stream_graphs_host.cpp"), *map(str, objects), "-pthread",
                    "-o", str(binary)], check=True, capture_output=True, text=True, timeout=300)
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.endswith("done\n"), result.stdout + result.stderr
