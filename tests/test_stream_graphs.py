"""Graph workloads (MPSGraph on Metal) in the runtime's stream: one command of the commit
policy like a dispatch, ending the compute encoder so that no barrier follows, refusals as
errors that count nothing. tests/stream_graphs_host.cpp drives native/runtime/stream.cpp over
a recording device, linked from the objects of the library under test (the device runs
nowhere else on Linux: the CPU device runs no graphs)."""

import subprocess
from pathlib import Path

from etmetal_testing import build_host_program, library_objects

RUNTIME_OBJECTS = ["runtime_stream.cpp.o", "runtime_library.cpp.o", "runtime_trace.cpp.o",
                   "runtime_error.cpp.o", "runtime_write_order.cpp.o",
                   "runtime_commit_policy.cpp.o", "device_settings.cpp.o"]


def test_graphs_share_the_kernels_commit_policy_and_hazards(tmp_path):
    binary = build_host_program(Path(__file__).with_name("stream_graphs_host.cpp"),
                                library_objects(*RUNTIME_OBJECTS), tmp_path / "stream_graphs_host")
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.endswith("done\n"), result.stdout + result.stderr
