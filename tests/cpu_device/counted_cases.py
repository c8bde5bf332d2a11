"""Traffic-counter cases; run by test_counters.py in a process with ETMETAL_COUNTERS=1 (the
flag selects how kernels are compiled, so it must be set before the library loads)."""

import numpy as np
import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from etmetal_py.kernels import compile_library

SOURCE = """
#include <metal_stdlib>
using namespace metal;

kernel void add(device const float* a, device const float* b, device float* y,
                uint i [[thread_position_in_grid]]) {
  y[i] = a[i] + b[i];
}

// A float4 load through a cast pointer, handed to a helper with pointer arithmetic.
static float row_sum(device const float4* row, uint count) {
  float4 total = 0.0f;
  for (uint k = 0; k < count; ++k) total += row[k];
  return total.x + total.y + total.z + total.w;
}

kernel void sum_rows16(device const float* x, device float* out, uint i [[thread_position_in_grid]]) {
  device const float* row = x + 16 * i;
  out[i] = row_sum(reinterpret_cast<device const float4*>(row), 4);
}

// Staged through threadgroup memory and read many times there: only the first load and
// the store touch device memory.
kernel void stage_and_reverse(device const float* x, device float* out,
                              uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                              uint n [[threads_per_threadgroup]]) {
  threadgroup float staged[64];
  staged[t] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float value = 0.0f;
  for (uint k = 0; k < n; ++k) value += staged[(t + k) % n] * 0.0f;
  out[i] = staged[n - 1 - t] + value;
}

kernel void count_into(device atomic_int* counter, device atomic_float* total,
                       uint i [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
}

// Read-modify-writes: each statement loads and stores its element (the compiler checks the
// location once per block in its address sanitizer; the counts must see both accesses).
kernel void accumulate(device float* total, device const float* x, device float4* rows,
                       uint i [[thread_position_in_grid]]) {
  total[i] += x[i];
  rows[i] = rows[i] * 2.0f;
}

kernel void scale_half(device const half* x, device half* y, constant int& factor,
                       uint i [[thread_position_in_grid]]) {
  y[i] = x[i] * half(factor);
}
"""


@pytest.fixture(scope="module")
def library():
    if etmetal_py.device_kind() != "cpu":
        pytest.skip("traffic counters exist on the CPU device")
    with compile_library(SOURCE) as compiled:
        yield compiled


def only_dispatch(counted):
    assert len(counted.dispatches) == 1
    return counted.dispatches[0]


def test_elementwise_add_is_exact(library):
    a = np.arange(10_000, dtype=np.float32)
    b = np.ones(10_000, np.float32)
    y = np.zeros(10_000, np.float32)
    with etmetal_py.counters() as counted:
        library.function("add")(a, b, y, threads=10_000, group=256)
    np.testing.assert_array_equal(y, a + 1)
    d = only_dispatch(counted)
    assert (d.kernel, d.bytes_read, d.bytes_written) == ("add", 80_000, 40_000)
    assert (d.threads, d.threadgroups) == (10_000, 40)  # 39 full groups and one edge group


def test_vector_loads_casts_helpers_and_pointer_arithmetic(library):
    x = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    out = np.zeros(300, np.float32)
    with etmetal_py.counters() as counted:
        library.function("sum_rows16")(x, out, threads=300)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-5)
    d = only_dispatch(counted)
    assert (d.bytes_read, d.bytes_written) == (x.nbytes, out.nbytes)


def test_threadgroup_memory_is_not_device_memory(library):
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    with etmetal_py.counters() as counted:
        library.function("stage_and_reverse")(x, out, threadgroups=4, group=64)
    np.testing.assert_array_equal(out, x.reshape(4, 64)[:, ::-1].reshape(-1))
    d = only_dispatch(counted)
    assert (d.bytes_read, d.bytes_written, d.threads, d.threadgroups) == (1024, 1024, 256, 4)


def test_atomics_count_one_read_and_one_write(library):
    counter = np.zeros(1, np.int32)
    total = np.zeros(1, np.float32)
    with etmetal_py.counters() as counted:
        library.function("count_into")(counter, total, threads=1000)
    assert counter[0] == 1000 and total[0] == 500.0
    d = only_dispatch(counted)
    assert (d.bytes_read, d.bytes_written) == (8000, 8000)


def test_read_modify_writes_count_their_loads_and_their_stores(library):
    total = np.arange(1000, dtype=np.float32)
    x = np.ones(1000, np.float32)
    rows = np.arange(4000, dtype=np.float32).reshape(1000, 4)
    with etmetal_py.counters() as counted:
        library.function("accumulate")(total, x, rows, threads=1000)
    np.testing.assert_array_equal(total, np.arange(1000) + 1)
    np.testing.assert_array_equal(rows, 2 * np.arange(4000, dtype=np.float32).reshape(1000, 4))
    d = only_dispatch(counted)
    # Per thread: reads 4 (total) + 4 (x) + 16 (rows), writes 4 (total) + 16 (rows).
    assert (d.bytes_read, d.bytes_written) == (24_000, 20_000)


def test_half_and_set_bytes_scalars(library):
    x = np.arange(1000).astype(np.float16)
    y = np.zeros(1000, np.float16)
    with etmetal_py.counters() as counted:
        library.function("scale_half")(x, y, 3, threads=1000)  # the int travels by set_bytes
    np.testing.assert_array_equal(y, x * np.float16(3))
    d = only_dispatch(counted)
    assert (d.bytes_read, d.bytes_written) == (2000, 2000)


def test_several_dispatches_in_order_and_window_errors(library):
    a = np.ones(100, np.float32)
    y = np.zeros(100, np.float32)
    with etmetal_py.counters() as counted:
        library.function("add")(a, a, y, threads=100)
        library.function("add")(y, a, y, threads=50)
    assert [(d.threads, d.bytes_read, d.bytes_written) for d in counted.dispatches] == [
        (100, 800, 400), (50, 400, 200)]
    # One window at a time; ending without a window is an error, not a crash.
    with etmetal_py.counters():
        with pytest.raises(etmetal_py.EtmetalError, match="already open"):
            etmetal_py.check(etmetal_py.lib.etmetal_counters_begin())
    count = etmetal_py.ffi.new("int64_t*")
    assert etmetal_py.lib.etmetal_counters_end(count) != 0
    assert "no counting window" in etmetal_py.last_error()
    record = etmetal_py.ffi.new("etmetal_dispatch_counters_t*")
    assert etmetal_py.lib.etmetal_counters_read(5, record) != 0


@pytest.mark.parametrize("name, dtype", [("abs", "float32"), ("angle", "float32"), ("abs", "int32")])
def test_unary_pointwise_fallback_reads_each_element_once(name, dtype):
    # abs and angle have one operand; the kernel loaded it a second time as the other operand
    # (1.5x the minimum bytes) until the host marked that operand a scalar.
    if etmetal_py.device_kind() != "cpu":
        pytest.skip("traffic counters exist on the CPU device")
    x = (torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 50).to(getattr(torch, dtype))
    device_x = Tensor.from_array(x)
    op = getattr(lib, f"aoti_torch_mps_{name}")

    def run():
        r0 = ffi.new("AtenTensorHandle*")
        etmetal_py.check(op(device_x.handle, r0))
        return Tensor(r0[0])

    run()  # compiles the kernel outside the window
    etmetal_py.synchronize()
    with etmetal_py.counters() as counted:
        result = run()
    result = result.torch()
    expected = getattr(torch, name)(x)
    assert result.dtype == expected.dtype
    torch.testing.assert_close(result, expected, rtol=1e-6, atol=1e-6)
    d = only_dispatch(counted)
    assert (d.kernel, d.bytes_read, d.bytes_written) == ("pointwise", 40_000, 40_000)


def cummax_long_lines(x):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_cummax(x.handle, 1, r0, r1))
    return [Tensor(r0[0]), Tensor(r1[0])]


def cumsum_long_lines(x):
    r0 = ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_cumsum(x.handle, 1, ffi.NULL, r0))
    return [Tensor(r0[0])]


def global_max_pool(x):
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    etmetal_py.check(lib.aoti_torch_mps_adaptive_max_pool2d(x.handle, ffi.new("int64_t[]", [1, 1]), 2, r0, r1))
    return [Tensor(r0[0]), Tensor(r1[0])]


# (op, input, reference, dispatches by launch shape: [(kernel, threads, bytes read, bytes
# written)]). With the GPU shape, lines / windows of 5,000 / 1,600 elements take a threadgroup
# each (256 / 64 threads) and touch every byte once. With the CPU device's shape one thread
# walks each (cummax and pooling read once too); cumsum scans 19 chunks of 264 elements per line:
# chunk totals (reading the input once), their offsets, then the scan (reading it again). None:
# not compared. scan_chunk_offsets replaces each total by its offset in place, and the counters
# miss such stores: the instrumentation drops the check of a store to an address the same code
# has just loaded (a kernel doing x[i] = x[i] + 1 counts no written byte).
CHUNKS = 2 * 19
LONG_LINE_CASES = [
    (cummax_long_lines, torch.randn(2, 5000), lambda x: list(torch.cummax(x, 1)),
     {"gpu": [("cummax_line_float", 512, 40_000, 2 * 5000 * (4 + 8))],
      "cpu": [("cummax_float", 2, 40_000, 2 * 5000 * (4 + 8))]}),
    (cumsum_long_lines, torch.randint(-9, 9, (2, 5000)), lambda x: [torch.cumsum(x, 1)],
     {"gpu": [("scan_line_long_long", 512, 80_000, 80_000)],
      "cpu": [("scan_chunk_totals_long_long", CHUNKS, 80_000, CHUNKS * 8),
              ("scan_chunk_offsets_ulong", 2, CHUNKS * 8, None),
              ("scan_apply_long_long", CHUNKS, 80_000 + CHUNKS * 8, 80_000)]}),
    (global_max_pool, torch.randn(1, 3, 40, 40), lambda x: list(torch.ops.aten.adaptive_max_pool2d(x, [1, 1])),
     {"gpu": [("adaptive_pool2d_window_float", 3 * 64, 3 * 1600 * 4, 3 * (4 + 8))],
      "cpu": [("adaptive_pool2d_float", 3, 3 * 1600 * 4, 3 * (4 + 8))]}),
]


@pytest.mark.parametrize("shape", ["gpu", "cpu"])
@pytest.mark.parametrize("case", LONG_LINE_CASES, ids=lambda case: case[0].__name__)
def test_long_lines_take_each_devices_launch_shape(case, shape, monkeypatch):
    # One thread per line (or window) walked 1,024 elements and more until the GPU shape's
    # kernels; the CPU device keeps that shape (ETMETAL_OP_SHAPES forces either).
    if etmetal_py.device_kind() != "cpu":
        pytest.skip("traffic counters exist on the CPU device")
    monkeypatch.setenv("ETMETAL_OP_SHAPES", shape)
    run, x, reference, expected = case
    device_x = Tensor.from_array(x)
    run(device_x)  # compiles the kernels outside the window
    etmetal_py.synchronize()
    with etmetal_py.counters() as counted:
        results = run(device_x)
    for result, expected_result in zip(results, reference(x)):
        assert torch.equal(result.torch(), expected_result)
    counts = [(d.kernel, d.threads, d.bytes_read, d.bytes_written) for d in counted.dispatches]
    assert len(counts) == len(expected[shape])
    for count, wanted in zip(counts, expected[shape]):
        assert all(want is None or got == want for got, want in zip(count, wanted)), (count, wanted)


def test_the_cpu_device_takes_the_cpu_shape_by_default(monkeypatch):
    if etmetal_py.device_kind() != "cpu":
        pytest.skip("traffic counters exist on the CPU device")
    monkeypatch.delenv("ETMETAL_OP_SHAPES", raising=False)
    device_x = Tensor.from_array(torch.randn(2, 5000))
    cummax_long_lines(device_x)
    etmetal_py.synchronize()
    with etmetal_py.counters() as counted:
        cummax_long_lines(device_x)
    assert [d.kernel for d in counted.dispatches] == ["cummax_float"]
