"""Kernel-sanitizer cases; run by test_validation.py in a process with ETMETAL_VALIDATE=1 (the
flag selects how kernels are compiled, so it must be set before the library loads). Each seeded
bug's report is computed by hand from the kernel; the clean kernels must produce none. A few
cases run by default (each kernel compiles instrumented, seconds apiece); the rest are slow."""

import ctypes
import os
import platform
import re

import numpy as np
import pytest

import etmetal_py
from etmetal_py.kernels import compile_library

# The kernels of the default cases come first, alone in a small library of their own (each
# kernel compiles the whole library, instrumented); SOURCE starts with them, so lines agree.
CORE_SOURCE = """
#include <metal_stdlib>
using namespace metal;

kernel void read_one_past(device const float* x, device float* y, uint i [[thread_position_in_grid]]) {
  y[i] = x[i + 1];
}

// Each thread reads its pair partner's slot without the barrier that needs.
kernel void missing_barrier(device const float* x, device float* y,
                            uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[t] = 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tile[t] = x[i];
  y[i] = tile[t ^ 1];
}

// Each thread adds one to the element after its own: the last thread's load and store both
// fall past the buffer (the store of a read-modify-write is checked too).
kernel void increment_next(device float* x, uint i [[thread_position_in_grid]]) {
  x[i + 1] += 1.0f;
}

// A counter updated by every thread without atomics: each update's load and store race with
// the previous thread's.
kernel void unsynchronised_counter(device int* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup int counter[1];
  if (t == 0) counter[0] = 0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  counter[0] += 1;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) y[0] = counter[0];
}

"""

SOURCE = CORE_SOURCE + """
kernel void write_one_past(device const float* x, device float* y, uint i [[thread_position_in_grid]]) {
  y[i + 1] = x[i];
}

kernel void read_one_before(device const float* x, device float* y, uint i [[thread_position_in_grid]]) {
  y[i] = x[int(i) - 1];
}

// A long scalar bound with set_bytes (8 bytes), read as two of them.
kernel void read_past_scalar(device long* y, constant long& n, uint i [[thread_position_in_grid]]) {
  y[i] = (&n)[i];
}

kernel void write_past_tile(device const float* x, device float* y,
                            uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[t + 1] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = tile[t];
}

kernel void read_before_written(device float* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  if (t > 0) tile[t] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[t] = tile[(t + 1) % 64];
}

kernel void early_return_before_barrier(device const float* x, device float* y,
                                        uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  if (t >= 40) return;
  tile[t] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = tile[t];
}

// Clean kernels: correct barriers, atomics, SIMD-group sums and scalars.
kernel void reverse_groups(device const float* x, device float* y,
                           uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                           uint n [[threads_per_threadgroup]]) {
  threadgroup float tile[64];
  tile[t] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = tile[n - 1 - t];
}

kernel void group_sums(device const float* x, device float* sums, uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                       uint g [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
                       uint simd [[simdgroup_index_in_threadgroup]], uint simds [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  const float s = simd_sum(x[i]);
  if (lane == 0) partial[simd] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) {
    float total = 0.0f;
    for (uint k = 0; k < simds; ++k) total += partial[k];
    sums[g] = total;
  }
}

kernel void count_in_group(device int* counts, uint t [[thread_position_in_threadgroup]],
                           uint g [[threadgroup_position_in_grid]]) {
  threadgroup atomic_int counter;
  if (t == 0) atomic_store_explicit(&counter, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t == 0) counts[g] = atomic_load_explicit(&counter, memory_order_relaxed);
}

kernel void scale(device const float* x, device float* y, constant long& factor, uint i [[thread_position_in_grid]]) {
  y[i] = x[i] * float(factor);
}

kernel void add_into(device float* y, device const float* x, uint i [[thread_position_in_grid]]) {
  y[i] += x[i];
}

// Shaped like Inductor's pointwise kernels: several buffers and scalars, a bound check.
kernel void blend(device const float* x, device const float* y, device float* out, constant long& a,
                  constant long& b, constant long& n, uint i [[thread_position_in_grid]]) {
  if (long(i) < n) out[i] = float(a) * x[i] + float(b) * y[i];
}

// A per-thread array across a barrier: as barrier regions it lives in the threads' frames, on
// the region function's stack.
kernel void local_array(device const float* x, device float* y, uint i [[thread_position_in_grid]],
                        uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  float acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = x[i] * float(k);
  tile[t] = acc[int(t) & 7];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float s = 0.0f;
  for (int k = 0; k < 8; ++k) s += acc[(k + int(t)) & 7] * tile[63 - t];
  y[i] = s;
}

// Each lane reads the previous lane's slot of its SIMD group's scratch: simdgroup_barrier orders
// the writes before the reads when `ordered` is set; otherwise nothing does.
kernel void simd_rotate(device const float* x, device float* y, constant int& ordered,
                        uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
                        uint simd [[simdgroup_index_in_threadgroup]]) {
  threadgroup float scratch[64];
  scratch[32 * simd + lane] = x[i];
  if (ordered) simdgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = scratch[32 * simd + (lane + 31) % 32];
}

// Each thread reads one byte of the next thread's float, then writes its own float again with
// no barrier between.
kernel void byte_of_next_float(device uchar* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  tile[t] = float(t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[t] = reinterpret_cast<threadgroup uchar*>(tile)[4 * ((t + 1) % 64) + 1];
  tile[t] = 2.0f;
}

// A simdgroup stores a matrix into threadgroup memory nothing touched before; after the barrier
// every lane reads two of its elements back (clean).
kernel void store_matrix_then_read(device const float* x, device float* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  simdgroup_float8x8 m;
  simdgroup_load(m, x, 8);
  simdgroup_store(m, tile, 8);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[t] = tile[t];
  y[t + 32] = tile[t + 32];
}

// The matrix from row 1 of a 64-float buffer: its last row is x[64..71], past the end.
kernel void load_matrix_past_a_buffer(device const float* x, device float* y) {
  simdgroup_float8x8 m;
  simdgroup_load(m, x, 8, ulong2(0, 1));
  simdgroup_store(m, y, 8);
}

// Every thread clears the flag, then the threads with a negative element set it, as Inductor's
// reductions do (stores of the value the flag already holds: no race); flag_per_thread has each
// thread store its own parity, a value the previous thread's store changed (a race each time).
kernel void same_value_flag(device const float* x, device float* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup bool flag;
  flag = false;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (x[t] < 0.0f) flag = true;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[t] = flag ? 1.0f : 0.0f;
}

kernel void flag_per_thread(device float* y, uint t [[thread_position_in_threadgroup]]) {
  threadgroup bool flag;
  flag = t % 2 == 0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[t] = flag ? 1.0f : 0.0f;
}
"""


# test_validation.py also runs the cases with every kernel on fibers.
ON_FIBERS = os.environ.get("ETMETAL_CPU_EXECUTION") == "fibers"


def runs_as(capfd, kernel, path):
    """The kernel was loaded to run on `path` (its usual one), or on fibers when forced."""
    assert f"kernel '{kernel}' runs as {'fibers' if ON_FIBERS else path}" in capfd.readouterr().err


def compiled(source):
    if etmetal_py.device_kind() != "cpu":
        pytest.skip("the kernel sanitizer is the CPU device's")
    return compile_library(source)


@pytest.fixture(scope="module")
def core():
    with compiled(CORE_SOURCE) as library:
        yield library


@pytest.fixture(scope="module")
def library():
    with compiled(SOURCE) as library:
        yield library


def failure(call):
    with pytest.raises(etmetal_py.EtmetalError) as caught:
        call()
    return str(caught.value)


def problems(message, kernel, count):
    """The report lines of `message`, after checking its header names `count` problems."""
    header = f"kernel '{kernel}': ETMETAL_VALIDATE found {count} problem{'s' if count > 1 else ''}:"
    assert header in message, message
    return [line.strip() for line in message[message.index(header) + len(header):].splitlines() if line.strip()]


def at(statement, kernel=""):
    """Where a report places `statement`: its MSL line (the first after `kernel void KERNEL(`)."""
    lines = SOURCE.splitlines()
    first = next(k for k, text in enumerate(lines) if f"kernel void {kernel}" in text)
    return f" at library.metal:{next(k for k in range(first, len(lines)) if statement in lines[k]) + 1}"


def thread(x, group, local):
    return f"thread ({x}, 0, 0) (threadgroup ({group}, 0, 0), position ({local}, 0, 0) in it)"


def test_read_one_element_past_a_buffer(core, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    function = core.function("read_one_past")
    # Checked on its usual path: the kernel's loop over the group's threads names each thread.
    runs_as(capfd, "read_one_past", "loop")
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    message = failure(lambda: function(x, y, threads=100, group=32))
    # Only thread 99 (group 3, position 3) reads x[100]: byte 400 of a 400-byte binding.
    assert problems(message, "read_one_past", 1) == [
        thread(99, 3, 3) + " reads 4 bytes at byte offset 400 of buffer 0, out of bounds (400 bytes bound)" +
        at("y[i] = x[i + 1];")]


def test_reports_are_appended_to_the_report_file(core, monkeypatch, tmp_path):
    report_file = tmp_path / "reports.txt"
    monkeypatch.setenv("ETMETAL_VALIDATE_REPORTS", str(report_file))
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    messages = [failure(lambda: core.function("read_one_past")(x, y, threads=8, group=8)) for _ in range(2)]
    # Each failed dispatch's whole message, one after the other; clean dispatches add nothing.
    core.function("read_one_past")(x, y, threads=7, group=7)
    entries = report_file.read_text()
    assert entries.count("ETMETAL_VALIDATE found 1 problem:") == 2
    assert all(m[m.index("kernel 'read_one_past'"):] in entries for m in messages)


@pytest.mark.slow
def test_write_one_element_past_a_buffer(library):
    x, y = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    message = failure(lambda: library.function("write_one_past")(x, y, threads=10, group=4))
    assert problems(message, "write_one_past", 1) == [
        thread(9, 2, 1) + " writes 4 bytes at byte offset 40 of buffer 1, out of bounds (40 bytes bound)" +
        at("y[i + 1] = x[i];")]


@pytest.mark.slow
def test_read_before_a_buffer(library):
    x, y = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    message = failure(lambda: library.function("read_one_before")(x, y, threads=10, group=10))
    # x starts a page: the read lands in the guard zone before it and faults after its report.
    report, fault = problems(message, "read_one_before", 1)
    assert report == (thread(0, 0, 0) + " reads 4 bytes at byte offset -4 of buffer 0, out of bounds (40 bytes bound)" +
                      at("y[i] = x[int(i) - 1];"))
    assert fault.startswith("then: kernel 'read_one_before': invalid memory access at ")


@pytest.mark.slow
def test_read_past_set_bytes_data(library):
    y = np.zeros(2, np.int64)
    message = failure(lambda: library.function("read_past_scalar")(y, 7, threads=2, group=2))
    assert problems(message, "read_past_scalar", 1) == [
        thread(1, 0, 1) + " reads 8 bytes at byte offset 8 of buffer 1, out of bounds (set_bytes data, 8 bytes bound)" +
        at("y[i] = (&n)[i];")]


def offset_in(line):
    return int(re.search(r"threadgroup memory offset (\d+)", line).group(1))


@pytest.mark.slow
def test_write_past_a_threadgroup_array(library):
    x, y = np.arange(128, dtype=np.float32), np.zeros(128, np.float32)
    message = failure(lambda: library.function("write_past_tile")(x, y, threadgroups=2, group=64))
    # Per group: position 63 writes tile[64], just past the 256-byte array, and position 0
    # reads tile[0], which nobody wrote (the writes went to tile[1..64]).
    lines = problems(message, "write_past_tile", 4)
    tile = offset_in(lines[1])
    outside = (f" writes 4 bytes at threadgroup memory offset {tile + 256}, outside every threadgroup variable and "
               "[[threadgroup(i)]] block" + at("tile[t + 1] = x[i];"))
    unwritten = (f" reads 4 bytes at threadgroup memory offset {tile} that no thread of the group has written "
                 "(uninitialised)" + at("y[i] = tile[t];", "write_past_tile"))
    assert lines == [thread(63, 0, 63) + outside, thread(0, 0, 0) + unwritten,
                     thread(127, 1, 63) + outside, thread(64, 1, 0) + unwritten]


def race(reader_or_writer, access, offset, other, did, where="", size=4):
    return (reader_or_writer + f" {access} {size} byte{'s' if size > 1 else ''} at threadgroup memory offset "
            f"{offset}, which {other} {did} since the last threadgroup_barrier (a data race)" + where)


WHOLE_THREADGROUP_MEMORY = """
#include <metal_stdlib>
using namespace metal;

// Exactly Metal's 32 KiB of threadgroup memory in two arrays (validation adds guard bytes after
// each, which are not the kernel's): each thread sums its slot of both halves.
kernel void whole_threadgroup_memory(device const float* x, device float* y,
                                     uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]]) {
  threadgroup float low[4096];
  threadgroup float high[4096];
  for (uint k = t; k < 4096; k += 64) {
    low[k] = x[k];
    high[k] = x[k + 4096];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[i] = low[t * 64] + high[4095 - t];
}

"""


def test_32_kib_of_threadgroup_memory_loads_and_runs():
    x, y = np.arange(8192, dtype=np.float32), np.zeros(64, np.float32)
    with compiled(WHOLE_THREADGROUP_MEMORY) as library:
        library.function("whole_threadgroup_memory")(x, y, threads=64, group=64)
    t = np.arange(64)
    np.testing.assert_array_equal(y, x[t * 64] + x[4096 + 4095 - t])


def test_missing_barrier_is_a_race(core, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    function = core.function("missing_barrier")
    # Checked on its usual path: the region loops name each thread and report the barriers.
    runs_as(capfd, "missing_barrier", "barrier regions")
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    message = failure(lambda: function(x, y, threadgroups=1, group=64))
    # Threads run in index order between barriers. In each pair (2k, 2k + 1), the odd thread
    # overwrites the slot the even one read, then reads the slot the even one wrote: 2 x 32.
    lines = problems(message, "missing_barrier", 64)
    tile = offset_in(lines[1])
    store, load = at("tile[t] = x[i];", "missing_barrier"), at("y[i] = tile[t ^ 1];")
    assert lines[:4] == [race(thread(1, 0, 1), "writes", tile + 4, thread(0, 0, 0), "read", store),
                         race(thread(1, 0, 1), "reads", tile, thread(0, 0, 0), "wrote", load),
                         race(thread(3, 0, 3), "writes", tile + 12, thread(2, 0, 2), "read", store),
                         race(thread(3, 0, 3), "reads", tile + 8, thread(2, 0, 2), "wrote", load)]


def test_read_modify_write_past_a_buffer_reports_its_load_and_its_store(core):
    x = np.zeros(10, np.float32)
    message = failure(lambda: core.function("increment_next")(x, threads=10, group=4))
    # Only thread 9 (group 2, position 1) updates x[10]: byte 40 of a 40-byte binding, read then
    # written by the one statement.
    update = " 4 bytes at byte offset 40 of buffer 0, out of bounds (40 bytes bound)" + at("x[i + 1] += 1.0f;")
    assert problems(message, "increment_next", 2) == [thread(9, 2, 1) + " reads" + update,
                                                      thread(9, 2, 1) + " writes" + update]


def test_unsynchronised_read_modify_write_is_a_race(core):
    y = np.zeros(1, np.int32)
    message = failure(lambda: core.function("unsynchronised_counter")(y, threadgroups=1, group=8))
    # Thread k (1..7) reads the counter thread k - 1 updated, then writes it: 2 x 7 reports, in
    # this order, both at the update's line.
    lines = problems(message, "unsynchronised_counter", 14)
    counter = offset_in(lines[0])
    update = at("counter[0] += 1;")
    expected = []
    for k in range(1, 8):
        for access in ("reads", "writes"):
            expected.append(race(thread(k, 0, k), access, counter, thread(k - 1, 0, k - 1), "wrote", update))
    assert lines == expected[:8] + ["(6 more not shown)"]


@pytest.mark.slow
def test_read_of_uninitialised_threadgroup_memory(library):
    y = np.zeros(64, np.float32)
    message = failure(lambda: library.function("read_before_written")(y, threadgroups=1, group=64))
    # Nobody writes tile[0]; thread 63 reads it.
    (line,) = problems(message, "read_before_written", 1)
    assert line == thread(63, 0, 63) + (f" reads 4 bytes at threadgroup memory offset {offset_in(line)} that no "
                                        "thread of the group has written (uninitialised)" +
                                        at("y[t] = tile[(t + 1) % 64];"))


@pytest.mark.slow
def test_barrier_reached_by_part_of_the_group(library):
    x, y = np.arange(128, dtype=np.float32), np.zeros(128, np.float32)
    message = failure(lambda: library.function("early_return_before_barrier")(x, y, threadgroups=2, group=64))
    lines = problems(message, "early_return_before_barrier", 2)
    assert sorted(lines) == [
        f"threadgroup_barrier reached by 40 of the 64 threads of threadgroup ({g}, 0, 0); 24 returned without "
        "reaching it" for g in (0, 1)]


@pytest.mark.slow
def test_clean_kernels_report_nothing_and_compute_right(library):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(256).astype(np.float32)
    y = np.zeros(256, np.float32)
    library.function("reverse_groups")(x, y, threadgroups=4, group=64)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].reshape(-1))

    counts = np.zeros(3, np.int32)
    library.function("count_in_group")(counts, threadgroups=3, group=96)
    np.testing.assert_array_equal(counts, [96, 96, 96])

    sums = np.zeros(2, np.float32)
    library.function("group_sums")(x[:192], sums, threadgroups=2, group=96)
    np.testing.assert_allclose(sums, x[:192].reshape(2, 96).sum(axis=1), rtol=1e-5)

    scaled = np.zeros(256, np.float32)
    library.function("scale")(x, scaled, 3, threads=256)
    np.testing.assert_array_equal(scaled, x * 3)

    library.function("add_into")(scaled, x, threads=256)
    np.testing.assert_array_equal(scaled, x * 4)

    blended = np.zeros(256, np.float32)
    library.function("blend")(x, scaled, blended, 2, -1, 200, threads=256)
    np.testing.assert_array_equal(blended, np.where(np.arange(256) < 200, 2 * x - scaled, 0))

    local = np.zeros(256, np.float32)
    library.function("local_array")(x, local, threadgroups=4, group=64)
    t = np.arange(64)
    partner = x.reshape(4, 64)[:, 63 - t] * ((63 - t) & 7)  # tile[63 - t]
    np.testing.assert_allclose(local, (28 * x.reshape(4, 64) * partner).reshape(-1), rtol=1e-5)


@pytest.mark.slow
def test_a_reported_dispatch_leaves_the_process_working(library):
    x, y = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
    assert "ETMETAL_VALIDATE" in failure(lambda: library.function("write_one_past")(x, y, threads=10, group=4))
    y2 = np.zeros(10, np.float32)
    library.function("scale")(x, y2, 2, threads=10)
    np.testing.assert_array_equal(y2, x * 2)


@pytest.mark.slow
def test_simdgroup_barrier_orders_its_lanes_and_its_absence_is_a_race(library):
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    library.function("simd_rotate")(x, y, 1, threads=64, group=64)
    np.testing.assert_array_equal(y, np.roll(x.reshape(2, 32), 1, axis=1).reshape(64))
    message = failure(lambda: library.function("simd_rotate")(x, y, 0, threads=64, group=64))
    read_line = at("y[i] = scratch[32 * simd + (lane + 31) % 32];")
    if ON_FIBERS:
        # Lanes run one after another. In each SIMD group lanes 1..31 read a slot the previous
        # lane wrote with no collective between (31 races), lane 0 reads the slot of lane 31,
        # which has not written it yet (uninitialised) and then writes the byte lane 0 read (a
        # race): 33 per group.
        lines = problems(message, "simd_rotate", 66)
        scratch = offset_in(lines[1])
        assert lines[0] == (thread(0, 0, 0) + f" reads 4 bytes at threadgroup memory offset {scratch + 124} that no "
                            "thread of the group has written (uninitialised)" + read_line)
        assert lines[1] == race(thread(1, 0, 1), "reads", scratch, thread(0, 0, 0), "wrote", read_line)
        return
    # As barrier regions (the `if` on a uniform value splits the body): every lane writes its
    # slot, then every lane reads its neighbour's with no collective between: lane l reads what
    # lane (l + 31) % 32 wrote, 32 races per SIMD group, in thread order.
    lines = problems(message, "simd_rotate", 64)
    scratch = offset_in(lines[1])
    expected = [race(thread(0, 0, 0), "reads", scratch + 124, thread(31, 0, 31), "wrote", read_line)]
    expected += [race(thread(t, 0, t), "reads", scratch + 4 * (t - 1), thread(t - 1, 0, t - 1), "wrote", read_line)
                 for t in range(1, 8)]
    assert lines == expected + ["(56 more not shown)"]


@pytest.mark.slow
def test_a_read_of_part_of_an_element_is_tracked_per_byte(library):
    y = np.zeros(64, np.uint8)
    message = failure(lambda: library.function("byte_of_next_float")(y, threadgroups=1, group=64))
    # The checks keep a float's four bytes as one state until an access touches part of them.
    # Thread t reads byte 1 of tile[t + 1]; thread t + 1 then rewrites tile[t + 1]: 63 races, and
    # thread 63 reads byte 1 of tile[0], which thread 0 rewrote: one more, in thread order.
    lines = problems(message, "byte_of_next_float", 64)
    tile = offset_in(lines[0]) - 4
    write = at("tile[t] = 2.0f;", "byte_of_next_float")
    assert lines == [race(thread(t, 0, t), "writes", tile + 4 * t, thread(t - 1, 0, t - 1), "read", write)
                     for t in range(1, 9)] + ["(56 more not shown)"]

@pytest.mark.slow
def test_simdgroup_matrix_loads_and_stores_are_checked(library):
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    # The store writes the tile (as barrier regions a simdgroup step once copied whole rows,
    # unseen by the checks, so the reads after it were reported as uninitialised).
    library.function("store_matrix_then_read")(x, y, threads=32, group=32)
    np.testing.assert_array_equal(y, x)
    # Each of the 8 elements of the last row is read once, 4 bytes past the 256 bytes bound each.
    message = failure(lambda: library.function("load_matrix_past_a_buffer")(x, y, threads=32, group=32))
    lines = problems(message, "load_matrix_past_a_buffer", 8)
    assert sorted(int(re.search(r"at byte offset (\d+) ", line).group(1)) for line in lines) == list(range(256, 288, 4))
    load = at("simdgroup_load(m, x, 8, ulong2(0, 1));", "load_matrix_past_a_buffer")
    assert all(line.endswith("of buffer 0, out of bounds (256 bytes bound)" + load) and " reads 4 bytes " in line
               for line in lines)


@pytest.mark.slow
def test_stores_of_the_value_held_are_no_race(library):
    x, y = np.arange(64, dtype=np.float32) - 8, np.zeros(64, np.float32)
    library.function("same_value_flag")(x, y, threadgroups=1, group=64)
    np.testing.assert_array_equal(y, np.ones(64, np.float32))
    # Thread 0 stores true; each thread k after it stores the other value, which thread k - 1 wrote.
    message = failure(lambda: library.function("flag_per_thread")(y, threadgroups=1, group=64))
    lines = problems(message, "flag_per_thread", 63)
    flag = offset_in(lines[0])
    store = at("flag = t % 2 == 0;", "flag_per_thread")
    assert lines == [race(thread(k, 0, k), "writes", flag, thread(k - 1, 0, k - 1), "wrote", store, size=1)
                     for k in range(1, 9)] + ["(55 more not shown)"]


FAULTING_SOURCE = """
#include <metal_stdlib>
using namespace metal;

int deep(int n, volatile thread int* sink) {
  volatile int frame[64];
  frame[n % 64] = n;
  *sink += frame[(n * 7) % 64];
  return n == 0 ? 0 : deep(n - 1, sink) + frame[0];
}
kernel void overflow_the_stack(device int* out, constant int& depth, uint i [[thread_position_in_grid]]) {
  volatile int sink = 0;
  out[i] = deep(depth, &sink);
}
kernel void double_into(device const float* x, device float* y, uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i];
}
"""


def function_and_its_count(library, name):
    """The kernel's function, and its object's count of running dispatches (None on hosts where
    the checks keep their state in a thread-local and need no count)."""
    def loaded():
        with open("/proc/self/maps") as maps:
            return {line.split()[-1] for line in maps if line.rstrip().endswith(".so")}
    before = loaded()
    function = library.function(name)
    if platform.machine() != "x86_64":
        return function, None
    (path,) = loaded() - before  # the kernel's object (one per kernel)
    object_file = ctypes.CDLL(path)  # dlopen hands out the object already loaded
    object_file.etm_kernel_running_dispatches.restype = ctypes.POINTER(ctypes.c_uint32)
    return function, object_file.etm_kernel_running_dispatches().contents


@pytest.mark.slow
def test_a_fault_in_a_checked_kernel_leaves_the_checks_working():
    """A fault abandons the kernel's entry point without returning through it; the object's
    count of running dispatches, which says when its checks may trust their state register,
    must come back to 0 all the same, and the next dispatches must run checked and right."""
    with compiled(FAULTING_SOURCE) as library:
        overflow, overflow_running = function_and_its_count(library, "overflow_the_stack")
        double_into, double_running = function_and_its_count(library, "double_into")
        message = failure(lambda: overflow(np.zeros(1, np.int32), np.int32(10 ** 7), threads=1))
        assert "'overflow_the_stack': stack overflow in threadgroup (0, 0, 0)" in message, message
        assert overflow_running is None or overflow_running.value == 0
        x, y = np.arange(10, dtype=np.float32), np.zeros(10, np.float32)
        double_into(x, y, threads=10)
        np.testing.assert_array_equal(y, 2 * x)
        # Still checked: one element past x, read by the last thread.
        message = failure(lambda: double_into(x[:9], y, threads=10, group=10))
        assert problems(message, "double_into", 1) == [
            thread(9, 0, 9) + " reads 4 bytes at byte offset 36 of buffer 0, out of bounds (36 bytes bound)" +
            " at library.metal:16"]
        assert double_running is None or double_running.value == 0
