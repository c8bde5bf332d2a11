"""The dispatch trace (ETMETAL_TRACE) and `etmetal trace summary`: a child process runs known
dispatches, copies and waits; the trace must hold exactly those, with their geometry, and the
summary must count them."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from etmetal_py import trace
from etmetal_py.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent("""\
    import numpy as np
    import etmetal_py
    from etmetal_py.kernels import compile_library

    library = compile_library('''
    #include <metal_stdlib>
    using namespace metal;
    kernel void scale(device float* out [[buffer(0)]], constant float* in [[buffer(1)]],
                      constant float& factor [[buffer(2)]], uint i [[thread_position_in_grid]]) {
      out[i] = in[i] * factor;
    }
    kernel void offset(device float* out [[buffer(0)]], uint2 p [[thread_position_in_grid]]) {
      out[p.y * 10 + p.x] += 1.0f;
    }
    ''')
    scale, offset = library.function("scale"), library.function("offset")
    a = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(a)
    for _ in range(3):
        scale(out, a, np.float32(2), threads=1000, group=128)
    offset(out, threads=(10, 100), group=(10, 10))
    assert np.array_equal(out, a * 2 + 1)
    print(etmetal_py.device_kind())
    """)


def run_child(tmp_path, trace_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, ETMETAL_TRACE=str(trace_path),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr
    return child


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("trace")
    path = tmp_path / "out.json"
    child = run_child(tmp_path, path)
    return path, child.stdout.split()[-1]


def test_trace_records_dispatches_with_geometry_and_times(traced):
    path, kind = traced
    events = json.loads(path.read_text())  # closed at exit: a complete JSON array
    dispatches = [e for e in events if e.get("cat") == "dispatch"]
    assert [e["name"] for e in dispatches] == ["scale"] * 3 + ["offset"]
    for event in dispatches[:3]:
        args = event["args"]
        assert args["grid"] == [1000, 1, 1] and args["threadgroup"] == [128, 1, 1]
        # two 4000-byte arrays (the runner may bind them in larger device buffers) and 4 bytes
        assert args["bytes_bound"] >= 8004
        assert args["library"].startswith("msl ")
    assert dispatches[3]["args"]["grid"] == [10, 100, 1]
    assert dispatches[3]["args"]["threadgroup"] == [10, 10, 1]
    buffers = [e for e in events if e.get("cat") == "command_buffer"]
    commits = [e for e in events if e.get("cat") == "commit"]
    waits = [e for e in events if e.get("cat") == "wait"]
    assert len(buffers) == len(commits) >= 1 and len(waits) >= 1
    if kind == "cpu":  # the CPU device times each command inside its command buffer
        for event in dispatches:
            assert event["ph"] == "X" and event["dur"] > 0
            assert any(b["tid"] == event["tid"] and b["ts"] <= event["ts"] and
                       event["ts"] + event["dur"] <= b["ts"] + b["dur"] + 1e-3 for b in buffers)
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    assert any(name.startswith(f"{kind} device: stream") for name in names.values())


def test_summary_counts_kernels(traced, capsys):
    path, kind = traced
    summary = trace.summarize(trace.load(str(path)))
    assert summary.dispatches == 4
    assert {(k.name, k.count) for k in summary.kernels} == {("scale", 3), ("offset", 1)}
    if kind == "cpu":
        assert summary.kernels[0].total_us > 0
        assert summary.dispatch_us == pytest.approx(sum(k.total_us for k in summary.kernels))
    assert cli_main(["trace", "summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 dispatches of 2 kernels" in out and "top kernels by count" in out
    assert out.index("scale") < out.index("offset")  # 3 dispatches before 1


def test_summary_reads_a_trace_cut_short(traced, tmp_path):
    path, _ = traced
    text = path.read_text().rstrip()
    assert text.endswith("]")
    cut = tmp_path / "cut.json"
    cut.write_text(text[:-1].rstrip() + ",\n{\"ph\": \"X\", \"na")  # killed mid-event
    summary = trace.summarize(trace.load(str(cut)))
    assert summary.dispatches == 4


def test_summary_of_a_file_that_is_not_a_trace_is_an_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    assert cli_main(["trace", "summary", str(bad)]) == 1
    assert "is not an etmetal trace" in capsys.readouterr().err
    assert cli_main(["trace", "summary", str(tmp_path / "missing.json")]) == 2


def test_unwritable_trace_path_is_reported_and_work_still_runs(tmp_path):
    child = run_child(tmp_path, tmp_path / "no-such-folder" / "out.json")
    assert "ETMETAL_TRACE: cannot write" in child.stderr
