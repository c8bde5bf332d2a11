"""Overlapping dispatches on the CPU device (ETMETAL_CPU_OVERLAP): independent small
dispatches of one command buffer run beside each other on idle workers; dispatches that read
or write a buffer another one writes (through any view of it) never overlap; results always
equal sequential execution (numpy). Each case runs in a child process, since the worker count
(ETMETAL_CPU_THREADS) is fixed when the pool starts; the dispatch trace (ETMETAL_TRACE) shows
when each dispatch ran."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cpu_device_testing import require_cpu_device

ROOT = Path(__file__).resolve().parents[2]

# Each dispatch: one threadgroup of 64 threads (a plain loop: it runs on one thread), adding
# 1.0 `steps` times (exact in float32), so that it lasts long enough to be seen overlapping.
CHILD = textwrap.dedent("""\
    import sys
    import numpy as np
    import etmetal_py
    from etmetal_py import Tensor, ffi, lib
    from cpu_device_testing import ShaderLibrary

    library = ShaderLibrary('''
    #include <metal_stdlib>
    using namespace metal;
    kernel void add_slowly(device float* out [[buffer(0)]], const device float* in [[buffer(1)]],
                           constant long& steps [[buffer(2)]], uint i [[thread_position_in_grid]]) {
      float total = in[i];
      for (long k = 0; k < steps; ++k) total += 1.0f;
      out[i] = total;
    }
    kernel void add_in_place(device float* data [[buffer(0)]], constant long& steps [[buffer(1)]],
                             uint i [[thread_position_in_grid]]) {
      float total = data[i];
      for (long k = 0; k < steps; ++k) total += 1.0f;
      data[i] = total;
    }
    kernel void fill_value(device float* out [[buffer(0)]], constant long& value [[buffer(1)]],
                           uint i [[thread_position_in_grid]]) {
      out[i] = float(value);
    }
    kernel void slow_stray(device float* out [[buffer(0)]], constant long& steps [[buffer(1)]],
                           uint i [[thread_position_in_grid]]) {
      float total = 1.0f;
      for (long k = 0; k < steps; ++k) total += 1.0f;
      out[i + (1ul << 40)] = total;  // 4 TiB past the buffer, once the loop is done
    }
    kernel void stray(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      out[i + (1ul << 40)] = 1.0f;
    }
    ''')
    add_slowly, add_in_place, fill_value, slow_stray, stray = (
        library.kernel(name) for name in ("add_slowly", "add_in_place", "fill_value", "slow_stray", "stray"))
    N, STEPS = 64, int(sys.argv[2])

    def dispatch(kernel, *arguments):
        kernel.encode(dict(enumerate(arguments)), N, N)

    def view(base, offset):
        out = ffi.new("AtenTensorHandle*")
        etmetal_py.check(lib.aoti_torch__reinterpret_tensor(
            base.handle, 1, ffi.new("int64_t[]", [N]), ffi.new("int64_t[]", [1]), offset, out))
        return Tensor(out[0])

    def tensor(values):
        return Tensor.from_array(np.asarray(values, np.float32), copy=True)

    x0 = np.arange(N, dtype=np.float32)
    if sys.argv[1] == "independent":
        # Three command buffers of eight dispatches writing disjoint outputs; dispatches 2m and
        # 2m + 1 read one input.
        for _ in range(3):
            inputs = [tensor(x0 + 100 * k) for k in range(4)]
            outputs = [Tensor.empty([N]) for _ in range(8)]
            for k, destination in enumerate(outputs):
                dispatch(add_slowly, destination, inputs[k // 2], STEPS)
            etmetal_py.synchronize()
            for k, destination in enumerate(outputs):
                np.testing.assert_array_equal(destination.numpy(), x0 + 100 * (k // 2) + STEPS)
    elif sys.argv[1] == "addresses":
        # A library that could follow device addresses stored in memory (a struct with a
        # pointer member): its dispatches never overlap; then the plain library's do.
        tables = ShaderLibrary('''
        #include <metal_stdlib>
        using namespace metal;
        struct Table { device float* data; };
        kernel void add_slowly_too(device float* out [[buffer(0)]], const device float* in [[buffer(1)]],
                                   constant long& steps [[buffer(2)]], uint i [[thread_position_in_grid]]) {
          float total = in[i];
          for (long k = 0; k < steps; ++k) total += 1.0f;
          out[i] = total;
        }
        kernel void through_table(device float* out [[buffer(0)]], constant Table& table [[buffer(1)]],
                                  uint i [[thread_position_in_grid]]) {
          out[i] = table.data[i];
        }
        ''')
        for kernel in (tables.kernel("add_slowly_too"), add_slowly):
            for _ in range(2):
                source = tensor(x0)
                outputs = [Tensor.empty([N]) for _ in range(8)]
                for destination in outputs:
                    dispatch(kernel, destination, source, STEPS)
                etmetal_py.synchronize()
                for destination in outputs:
                    np.testing.assert_array_equal(destination.numpy(), x0 + STEPS)
        tables.close()
    elif sys.argv[1] == "faults":
        # The first failure in command order is the command buffer's, even when a later
        # dispatch beside it fails first; dispatches that started finish.
        a, b, c, d = (Tensor.empty([N]) for _ in range(4))
        source = tensor(x0)
        dispatch(slow_stray, a, STEPS)
        dispatch(stray, b)
        dispatch(add_slowly, c, source, STEPS)
        try:
            etmetal_py.synchronize()
            print("no error")
        except etmetal_py.EtmetalError as error:
            print("ERROR:" + str(error).splitlines()[0])
        dispatch(add_slowly, d, source, STEPS)  # the stream and the workers go on
        etmetal_py.synchronize()
        np.testing.assert_array_equal(d.numpy(), x0 + STEPS)
    else:
        # One command buffer in which every dispatch conflicts with the one before it.
        x = [tensor(x0)] + [Tensor.empty([N]) for _ in range(3)]
        base, o = Tensor.empty([2 * N]), Tensor.empty([N])
        lo, hi = view(base, 0), view(base, N)
        dispatch(add_slowly, x[1], x[0], STEPS)  # x1 = x0 + s
        dispatch(add_slowly, x[2], x[1], STEPS)  # read after write: x2 = x0 + 2s
        dispatch(add_in_place, x[2], STEPS)      # read and write after write: x0 + 3s
        dispatch(add_slowly, x[3], x[2], STEPS)  # x3 = x0 + 4s
        dispatch(fill_value, x[2], 7)            # write after read: x2 = 7
        dispatch(add_in_place, x[2], STEPS)      # write after write: 7 + s
        dispatch(add_slowly, lo, x[2], STEPS)    # lo = 7 + 2s
        dispatch(add_slowly, hi, x[0], STEPS)    # other bytes, same buffer: hi = x0 + s
        dispatch(add_slowly, o, lo, STEPS)       # read through a view after write: 7 + 3s
        dispatch(add_in_place, hi, STEPS)        # write through a view after read: x0 + 2s
        etmetal_py.synchronize()
        np.testing.assert_array_equal(x[1].numpy(), x0 + STEPS)
        np.testing.assert_array_equal(x[3].numpy(), x0 + 4 * STEPS)
        np.testing.assert_array_equal(x[2].numpy(), np.full(N, 7 + STEPS, np.float32))
        np.testing.assert_array_equal(o.numpy(), np.full(N, 7 + 3 * STEPS, np.float32))
        np.testing.assert_array_equal(
            base.numpy(), np.concatenate([np.full(N, 7 + 2 * STEPS, np.float32), x0 + 2 * STEPS]))
    library.close()
    print("ok")
    """)

STEPS = 200000  # a few milliseconds per dispatch


def run_case(tmp_path, case, threads, overlap):
    require_cpu_device()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    trace_path = tmp_path / f"{case}-{threads}-{overlap}.json"
    env = dict(os.environ, ETMETAL_TRACE=str(trace_path), ETMETAL_CPU_THREADS=str(threads),
               ETMETAL_CPU_OVERLAP=overlap,
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "cpu_device"),
                                           os.environ.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, str(script), case, str(STEPS)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0 and child.stdout.split()[-1] == "ok", child.stderr
    events = json.loads(trace_path.read_text())
    dispatches = [e for e in events if e.get("cat") == "dispatch"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    return dispatches, tracks, child.stdout


def overlapping_pairs(dispatches):
    """Pairs of dispatches whose intervals overlap by more than the trace's rounding."""
    pairs = []
    for i, a in enumerate(dispatches):
        for b in dispatches[i + 1:]:
            if min(a["ts"] + a["dur"], b["ts"] + b["dur"]) - max(a["ts"], b["ts"]) > 0.01:
                pairs.append((a, b))
    return pairs


def test_independent_dispatches_overlap_on_two_workers(tmp_path):
    dispatches, tracks, _ = run_case(tmp_path, "independent", threads=2, overlap="1")
    assert len(dispatches) == 24
    pairs = overlapping_pairs(dispatches)
    assert pairs, "no two independent dispatches overlapped"
    # Dispatches reading one buffer need no barrier between them: such pairs overlap too.
    position = {id(d): k % 8 for k, d in enumerate(dispatches)}
    assert any(position[id(a)] // 2 == position[id(b)] // 2 for a, b in pairs)
    # Overlapping slices are on different tracks: a lane track of the stream.
    for a, b in pairs:
        assert a["tid"] != b["tid"]
    lanes = {tid for tid, name in tracks.items() if "overlapping lane" in name}
    assert lanes and any(d["tid"] in lanes for d in dispatches)


@pytest.mark.parametrize("threads, overlap", [(2, "0"), (1, "1")])
def test_without_overlap_dispatches_run_one_at_a_time(tmp_path, threads, overlap):
    dispatches, tracks, _ = run_case(tmp_path, "independent", threads=threads, overlap=overlap)
    assert len(dispatches) == 24
    assert not overlapping_pairs(dispatches)
    assert not any("overlapping lane" in name for name in tracks.values())
    assert len({d["tid"] for d in dispatches}) == 1


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_conflicting_dispatches_never_overlap(tmp_path, overlap):
    dispatches, _, _ = run_case(tmp_path, "dependent", threads=2, overlap=overlap)
    assert [d["name"] for d in dispatches] == (
        ["add_slowly", "add_slowly", "add_in_place", "add_slowly", "fill_value", "add_in_place"] +
        ["add_slowly"] * 3 + ["add_in_place"])
    assert not overlapping_pairs(dispatches)
    for earlier, later in zip(dispatches, dispatches[1:]):
        assert later["ts"] >= earlier["ts"] + earlier["dur"] - 0.002


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_the_first_failing_dispatch_in_order_is_reported(tmp_path, overlap):
    dispatches, _, out = run_case(tmp_path, "faults", threads=2, overlap=overlap)
    message = out.splitlines()[0]
    assert message.startswith("ERROR:") and "kernel 'slow_stray': invalid memory access" in message, out
    assert "'stray'" not in message
    names = [d["name"] for d in dispatches]
    assert names[0] == "slow_stray" and names[-1] == "add_slowly"
    if overlap == "0":  # one at a time: nothing after the failing dispatch ran
        assert names == ["slow_stray", "add_slowly"]


def test_kernels_that_may_follow_stored_addresses_never_overlap(tmp_path):
    dispatches, _, _ = run_case(tmp_path, "addresses", threads=2, overlap="1")
    assert [d["name"] for d in dispatches] == ["add_slowly_too"] * 16 + ["add_slowly"] * 16
    assert not overlapping_pairs(dispatches[:16])
    assert overlapping_pairs(dispatches[16:]), "the plain library's dispatches did not overlap"
