"""Barrier regions (msl_barrier_regions.cpp): kernels with barriers, simd_* collectives and
simdgroup matrices run a whole threadgroup per call instead of one fiber per thread. Each
kernel runs on every path it has (ETMETAL_CPU_EXECUTION=regions, =fibers) and is checked
against numpy; which path a kernel takes, and why, is in the ETMETAL_LOG=debug output."""

import numpy as np
import pytest

from cpu_device_testing import device_array
from etmetal_py.tensors import Tensor

PATHS = ["regions", "fibers"]

SOURCE = """
#include <metal_stdlib>
using namespace metal;

// C = A (M x K) * B (K x N) by 32x32 blocks: barriers around threadgroup tiles inside a K loop,
// per-thread pointers and values live across them, simdgroup matrices accumulating.
kernel void tiled_gemm(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                       device float* c [[buffer(2)]], constant uint3& mnk [[buffer(3)]],
                       uint2 group [[threadgroup_position_in_grid]],
                       uint t [[thread_index_in_threadgroup]], uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float a_tile[32 * 8];
  threadgroup float b_tile[8 * 32], results[32 * 32];
  const uint row0 = group.y * 32, column0 = group.x * 32;
  const uint sr = (simdgroup / 2) * 16, sc = (simdgroup % 2) * 16;
  simdgroup_float8x8 acc[2][2];
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k0 = 0; k0 < mnk.z; k0 += 8) {
    for (uint i = t; i < 32 * 8; i += 128) {
      const uint row = row0 + i / 8, k = k0 + i % 8;
      a_tile[i] = row < mnk.x && k < mnk.z ? a[row * mnk.z + k] : 0.0f;
      const uint kb = k0 + i / 32, column = column0 + i % 32;
      b_tile[i] = kb < mnk.z && column < mnk.y ? b[kb * mnk.y + column] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 left[2], right[2];
    for (uint i = 0; i < 2; ++i) simdgroup_load(left[i], a_tile, 8, ulong2(0, sr + 8 * i));
    for (uint j = 0; j < 2; ++j) simdgroup_load(right[j], b_tile, 32, ulong2(sc + 8 * j, 0));
    for (uint i = 0; i < 2; ++i)
      for (uint j = 0; j < 2; ++j) simdgroup_multiply_accumulate(acc[i][j], left[i], right[j], acc[i][j]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  for (uint i = 0; i < 2; ++i)
    for (uint j = 0; j < 2; ++j) simdgroup_store(acc[i][j], results, 32, ulong2(sc + 8 * j, sr + 8 * i));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = t; i < 32 * 32; i += 128) {
    const uint row = row0 + i / 32, column = column0 + i % 32;
    if (row < mnk.x && column < mnk.y) c[row * mnk.y + column] = results[i];
  }
}

// Per group of up to 256: the threads reduce in threadgroup memory (a changed pointer
// parameter, a value kept across barriers; threads past n add zeros), then those past n return
// (after the barrier: Metal requires every thread of a group to reach it) and the others go on
// with collectives under ifs on per-thread values, their returned lanes inactive.
kernel void reduce_rows(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                        constant uint& n [[buffer(2)]],
                        uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                        uint group [[threadgroup_position_in_grid]], uint size [[threads_per_threadgroup]]) {
  threadgroup float partial[8];
  const bool live = gid < n;
  in += group * 256;
  const float x = live ? in[lid] : 0.0f;
  float shuffled = x;
  for (ushort offset = 16; offset > 0; offset /= 2) shuffled += simd_shuffle_down(shuffled, offset);
  const float s = simd_sum(x);
  if (lane == 0) partial[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (!live) return;
  float odd_even;
  if (lane % 2 == 0) {
    odd_even = simd_sum(x);
  } else {
    odd_even = -simd_max(x);
  }
  if (sg == 0) {
    const uint live = min(size, n - group * 256);
    const float total = simd_sum(lane < (live + 31) / 32 ? partial[lane] : 0.0f);
    if (lane == 0) out[group * 4] = total;
  }
  if (lid == 0) {
    out[group * 4 + 1] = s;
    out[group * 4 + 2] = shuffled;
    out[group * 4 + 3] = odd_even + x;
  }
}

// A per-thread array live across a barrier, too large for the region form's frames: those
// groups run on fibers.
kernel void big_frames(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                       uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float shared[1024];
  float scratch[512];
  for (uint i = 0; i < 512; ++i) scratch[i] = in[gid] * float(i);
  shared[lid] = scratch[511];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = shared[lid ^ 1] + scratch[1];
}

// A barrier in a loop whose trip count is a per-thread variable: Metal requires it to be the
// same for all threads, so the region form reads it in the first live thread's frame.
kernel void rotate_rounds(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
                           uint size [[threads_per_threadgroup]]) {
  threadgroup float shared[64];
  const uint rounds = size / 32 + lid * 0;
  shared[lid] = float(lid);
  for (uint r = 0; r < rounds; ++r) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float next = shared[(lid + 1) % size];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    shared[lid] = next;
  }
  out[lid] = shared[lid];
}

// shuffle_and_fill across the whole simdgroup and within vectors of 8 lanes, after a barrier
// (so the kernel has a region form), in groups whose last simdgroup is partial.
kernel void shuffle_fill(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float shared[64];
  shared[lid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float x = shared[lid];
  const float down = simd_shuffle_and_fill_down(x, x + 100.0f, ushort(3));
  const float up8 = simd_shuffle_and_fill_up(x, 1000.0f + x, ushort(2), ushort(8));
  out[gid * 2] = down;
  out[gid * 2 + 1] = up8;
}

// Loops whose trip counts differ between simdgroups and between lanes, around collectives:
// each collective sees the lanes still iterating.
kernel void divergent_loops(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                            uint lid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float shared[64];
  shared[lid] = in[lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc = 0.0f;
  for (uint r = 0; r < sg + 1; ++r) acc += simd_sum(shared[lid] * float(r + 1));
  uint k = lane % 4;
  float partial = 0.0f;
  while (k < 6) {
    partial += simd_sum(float(k));
    k += 1;
  }
  out[lid * 2] = acc;
  out[lid * 2 + 1] = partial;
}

// Collectives before a ?:, && or || of their statement (evaluated by every thread), a ?:
// inside a collective's operand, and a collective after a || (reached by some threads only:
// fibers).
kernel void conditional_operators(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                  uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float shared[64];
  shared[lid] = in[lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float x = shared[lid];
  const float sign = simd_sum(x) > 0.0f ? 1.0f : -1.0f;
  const bool both = simd_any(x > 5.0f) && x < 0.0f;
  const float nested = simd_max(x > 0.0f ? x : 0.0f);
  out[lid * 3] = sign;
  out[lid * 3 + 1] = both ? 1.0f : 0.0f;
  out[lid * 3 + 2] = nested;
}

kernel void collective_after_or(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                uint lid [[thread_index_in_threadgroup]]) {
  const float x = in[lid];
  const bool any = x > 100.0f || simd_any(x > 5.0f);
  out[lid] = any ? 1.0f : 0.0f;
}

// simd_sum over whole simdgroups, over a partial last simdgroup, and under an if on the lane
// (the region form visits a predicated branch's threads by their lane bits).
kernel void ordered_sums(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                         uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float shared[256];
  shared[lid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float x = shared[lid];
  const float all = simd_sum(x);
  float some = -1.0f;
  if (lane % 3 != 1) some = simd_sum(x);
  out[gid * 2] = all;
  out[gid * 2 + 1] = some;
}

// A barrier under an if on a per-thread value (taken by every thread here): fibers.
kernel void guarded_barrier(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
                            uint size [[threads_per_threadgroup]]) {
  threadgroup float shared[64];
  shared[lid] = float(lid);
  if (lid < 1000) threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lid] = shared[(lid + 1) % size];
}

// A loop around a barrier whose header steps a per-thread variable: each thread flips its own.
kernel void stepped_parity(device int* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
  threadgroup uint slots[2][4];
  uint parity = 0;
  for (uint block = 0; block < 6; block += 1, parity ^= 1) {
    slots[parity][lid] = block * 10 + lid;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[block * 4 + lid] = int(slots[parity][(lid + 1) % 4] * 2 + parity);
  }
}

// Regions whose only statement is an `if` on a thread's lane or index (after answers of simd_
// reductions) run for the threads it selects: one lane of each simdgroup (the partial last one
// too), one lane of each quad, one thread of the group, with returned lanes inactive. A
// statement after such an if runs for every thread; a local named like the attribute, declared
// before it in its region, selects nothing.
kernel void selected_threads(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                             constant uint& n [[buffer(2)]],
                             uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]],
                             ushort lane [[thread_index_in_simdgroup]], uint quad_lane [[thread_index_in_quadgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float partial[2];
  const float x = in[gid];
  const float s = simd_sum(x);
  if (lane == 5) partial[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 37u) out[gid * 4 + 2] = partial[0] + partial[1];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (gid >= n) return;
  const float t = simd_sum(x + 1.0f);
  if (lane == 0) out[gid * 4 + 3] = t;
  out[gid * 4 + 3] += 1.0f;
  {
    const float v = simd_sum(x);
    const uint lane = lid % 3;
    if (lane == 0) out[gid * 4] = v;
  }
  const float m = simd_max(x);
  if (3 == quad_lane) out[gid * 4 + 1] = m;
}
"""


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    monkeypatch.setenv("ETMETAL_CPU_EXECUTION", request.param)
    return request.param


def test_tiled_simdgroup_matrix_gemm(msl, path):
    kernel = msl(SOURCE).kernel("tiled_gemm")
    m, n, k = 70, 45, 37  # partial blocks and a partial last K step
    rng = np.random.default_rng(5)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = (rng.integers(-4, 5, (k, n)) * 0.5).astype(np.float32)
    c = Tensor.empty([m * n])
    mnk = device_array(np.array([m, n, k, 0], np.uint32))
    groups = (-(-n // 32), -(-m // 32))
    kernel.run({0: device_array(a.ravel()), 1: device_array(b.ravel()), 2: c, 3: mnk},
               (groups[0] * 128, groups[1]), (128, 1))
    np.testing.assert_array_equal(c.numpy().reshape(m, n), a @ b)


def test_returns_collectives_and_predicated_branches(msl, path, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(SOURCE).kernel("reduce_rows")
    if path == "regions":  # its two `live`s, each read across a barrier, are in the thread's frame
        assert "kernel 'reduce_rows' runs as barrier regions" in capfd.readouterr().err
    n = 256 * 3 + 77  # the last group: 77 live threads of 96 launched (three simdgroups)
    groups = 4
    x = np.random.default_rng(6).integers(-20, 20, groups * 256).astype(np.float32)
    out = Tensor.empty([groups * 4])
    out.write(np.full(groups * 4, -1.0, np.float32))
    count = device_array(np.array([n], np.uint32))
    kernel.run({0: device_array(x), 1: out, 2: count}, 256 * 3 + 96, 256)
    got = out.numpy().reshape(groups, 4)
    for g in range(groups):
        live = min(256, n - g * 256)
        rows = x[g * 256:g * 256 + live]
        first = rows[:min(32, live)]
        assert got[g, 0] == rows.sum()
        assert got[g, 1] == first.sum()
        assert got[g, 2] == first.sum()  # the shuffle-down tree leaves the sum in lane 0
        assert got[g, 3] == first[0::2].sum() + first[0]


def test_frames_too_large_for_the_region_form_run_on_fibers(msl, path):
    kernel = msl(SOURCE).kernel("big_frames")
    x = np.arange(1024 * 2, dtype=np.float32)
    out = Tensor.empty([x.size])
    kernel.run({0: device_array(x), 1: out}, x.size, 1024)
    partner = np.arange(x.size) ^ 1
    np.testing.assert_array_equal(out.numpy(), x[partner] * 511 + x)


def test_the_chosen_path_and_the_reason_are_logged(msl, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    library = msl(SOURCE)
    library.kernel("tiled_gemm")
    library.kernel("rotate_rounds")
    library.kernel("guarded_barrier")
    library.kernel("shuffle_fill")
    library.kernel("divergent_loops")
    library.kernel("conditional_operators")
    library.kernel("collective_after_or")
    err = capfd.readouterr().err
    assert "kernel 'tiled_gemm' runs as barrier regions" in err
    assert "kernel 'rotate_rounds' runs as barrier regions" in err
    assert "kernel 'shuffle_fill' runs as barrier regions" in err
    assert "kernel 'divergent_loops' runs as barrier regions" in err
    assert "kernel 'conditional_operators' runs as barrier regions" in err
    assert "kernel 'collective_after_or' runs as fibers: line" in err
    assert "'simd_any' after a ?:, && or || in its statement" in err
    assert "kernel 'guarded_barrier' runs as fibers: line" in err
    assert "a barrier or 'threadgroup_barrier' under an if on per-thread values" in err
    library.kernel("stepped_parity")
    err = capfd.readouterr().err
    assert "kernel 'stepped_parity' runs as fibers: line" in err
    assert "the header of a loop around a barrier changes the per-thread variable 'parity'" in err


def test_regions_selected_by_lane_or_index(msl, path, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(SOURCE).kernel("selected_threads")
    if path == "regions":
        assert "kernel 'selected_threads' runs as barrier regions" in capfd.readouterr().err
    size, groups = 40, 3  # a full simdgroup and 8 lanes per group
    n = size * 2 + 30  # the last group's threads from 30 on return: lanes 30, 31 and all of the second
    x = np.random.default_rng(12).integers(-9, 10, size * groups).astype(np.float32)
    out = Tensor.empty([size * groups * 4])
    out.write(np.full(size * groups * 4, -1.0, np.float32))
    kernel.run({0: out, 1: device_array(x), 2: device_array(np.array([n], np.uint32))}, size * groups, size)
    got = out.numpy().reshape(-1, 4)
    expected = np.full((size * groups, 4), -1.0, np.float32)
    for gid in range(size * groups):
        lid = gid % size
        first = gid - lid + lid // 32 * 32
        simdgroup = range(first, min(first + 32, gid - lid + size))
        active = [x[i] for i in simdgroup if i < n]
        if lid == 37:
            expected[gid, 2] = x[gid - lid:gid - lid + size].sum()
        if gid >= n:
            continue
        if lid % 3 == 0:
            expected[gid, 0] = sum(active)
        if lid % 4 == 3:
            expected[gid, 1] = max(active)
        expected[gid, 3] = sum(active) + len(active) + 1 if lid % 32 == 0 else 0.0
    np.testing.assert_array_equal(got, expected)


def test_a_loop_header_stepping_per_thread_variables(msl, path):
    kernel = msl(SOURCE).kernel("stepped_parity")
    out = Tensor.empty([24], np.int32)
    kernel.run({0: out}, 4, 4)
    block, lid = np.divmod(np.arange(24), 4)
    np.testing.assert_array_equal(out.numpy(), (block * 10 + (lid + 1) % 4) * 2 + block % 2)


def test_loop_bound_from_a_per_thread_variable(msl, path):
    kernel = msl(SOURCE).kernel("rotate_rounds")
    out = Tensor.empty([64])
    kernel.run({0: out}, 64, 64)
    np.testing.assert_array_equal(out.numpy(), (np.arange(64) + 2) % 64)


def test_shuffle_and_fill(msl, path):
    kernel = msl(SOURCE).kernel("shuffle_fill")
    group, groups = 40, 2  # a full simdgroup and one of 8 lanes per group
    x = np.arange(group * groups, dtype=np.float32) * 3 + 1
    out = Tensor.empty([x.size * 2])
    kernel.run({0: device_array(x), 1: out}, x.size, group)
    got = out.numpy().reshape(-1, 2)
    for gid in range(x.size):
        lid = gid % group
        base = gid - lid % 32
        width = min(32, group - (lid - lid % 32))  # lanes of this simdgroup; the others read 0
        def lane(k):
            return x[base + k] if k < width else 0.0
        offset = lid % 32
        down = lane(offset + 3) if offset + 3 < 32 else lane(offset + 3 - 32) + 100 * (offset + 3 - 32 < width)
        v = offset - offset % 8
        up = lane(v + offset % 8 - 2) if offset % 8 >= 2 else (
            1000 + lane(v + (offset % 8 + 6) % 8) if v + (offset % 8 + 6) % 8 < width else 0.0)
        assert got[gid, 0] == down and got[gid, 1] == up, (gid, got[gid], down, up)


def test_loops_with_per_thread_trip_counts_around_collectives(msl, path):
    kernel = msl(SOURCE).kernel("divergent_loops")
    x = np.random.default_rng(8).integers(-9, 9, 64).astype(np.float32)
    out = Tensor.empty([128])
    kernel.run({0: device_array(x), 1: out}, 64, 64)
    got = out.numpy().reshape(64, 2)
    starts = np.arange(32) % 4
    for lid in range(64):
        sg, lane = divmod(lid, 32)
        acc = sum(float((x[sg * 32:sg * 32 + 32] * (r + 1)).sum()) for r in range(sg + 1))
        s = starts[lane]
        partial = sum(float((starts[starts <= 5 - j] + j).sum()) for j in range(6 - s))
        assert got[lid, 0] == acc and got[lid, 1] == partial, (lid, got[lid], acc, partial)


def test_collectives_before_conditional_operators(msl, path):
    kernel = msl(SOURCE).kernel("conditional_operators")
    x = np.random.default_rng(9).integers(-9, 9, 64).astype(np.float32)
    out = Tensor.empty([64 * 3])
    kernel.run({0: device_array(x), 1: out}, 64, 64)
    got = out.numpy().reshape(64, 3)
    for lid in range(64):
        lanes = x[lid - lid % 32:lid - lid % 32 + 32]
        assert got[lid, 0] == (1.0 if lanes.sum() > 0 else -1.0)
        assert got[lid, 1] == float(bool((lanes > 5).any()) and x[lid] < 0)
        assert got[lid, 2] == max(v if v > 0 else 0.0 for v in lanes)


def lane_order_sum(values):
    total = np.float32(values[0])
    for v in values[1:]:
        total = np.float32(total + v)
    return total


def tree_order_sum(values):
    values = [np.float32(v) for v in values]
    while len(values) > 1:
        values = [np.float32(values[i] + values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def test_simd_sum_combines_lanes_in_lane_order(msl, path):
    """simd_sum adds the lanes that take part from lane 0 up, in float32, on every path: full
    simdgroups, the partial last one of a group, and lanes under an if. The data make the
    order visible (a tree order gives other sums)."""
    kernel = msl(SOURCE).kernel("ordered_sums")
    size, groups = 232, 3  # seven full simdgroups and eight lanes per group
    rng = np.random.default_rng(11)
    x = (rng.choice([1.0e8, -1.0e8, 3.0, 0.75, -5.5], groups * size) * rng.integers(1, 9, groups * size))
    x = x.astype(np.float32)
    out = Tensor.empty([groups * size * 2])
    kernel.run({0: device_array(x), 1: out}, groups * size, size)
    got = out.numpy().reshape(-1, 2)
    order_visible = False
    for gid in range(groups * size):
        group_base = gid - gid % size
        first = group_base + (gid - group_base) // 32 * 32
        lanes = x[first:min(first + 32, group_base + size)]
        some = [v for i, v in enumerate(lanes) if i % 3 != 1]
        assert got[gid, 0] == lane_order_sum(lanes), (gid, got[gid, 0], lane_order_sum(lanes))
        expected_some = lane_order_sum(some) if (gid % size) % 32 % 3 != 1 else np.float32(-1.0)
        assert got[gid, 1] == expected_some, (gid, got[gid, 1], expected_some)
        order_visible |= bool(lane_order_sum(lanes) != tree_order_sum(lanes))
    assert order_visible


def test_a_kernel_the_region_form_declines_still_runs(msl, path):
    kernel = msl(SOURCE).kernel("guarded_barrier")
    out = Tensor.empty([48])
    kernel.run({0: out}, 48, 48)
    np.testing.assert_array_equal(out.numpy(), (np.arange(48) + 1) % 48)


MATRIX_SOURCE = """
#include <metal_stdlib>
using namespace metal;

// Each simdgroup: a from a 10 x 11 matrix at origin (2, 1), b transposed from a 9 x 9 matrix at
// origin (1, 0), c plain; d = a * b + c and e = a * b stored (e transposed at origin (1, 0)),
// f = a * ones + twos from an initialised array of matrices, g = a * b and h = a * b + c written
// over an operand (b's copy, a's copy), and every lane's two elements of d as it holds them.
kernel void matrix_operations(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                              device const float* c [[buffer(2)]], device float* out [[buffer(3)]],
                              device float* lanes [[buffer(4)]],
                              uint lid [[thread_index_in_threadgroup]],
                              uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  simdgroup_float8x8 ma, mb, mc, md, me;
  simdgroup_load(ma, a + simdgroup * 110, 11, ulong2(2, 1));
  simdgroup_load(mb, b + simdgroup * 81, 9, ulong2(1, 0), true);
  simdgroup_load(mc, c + simdgroup * 64, 8);
  simdgroup_multiply_accumulate(md, ma, mb, mc);
  simdgroup_multiply(me, ma, mb);
  simdgroup_store(md, out + simdgroup * 337, 8);
  simdgroup_store(me, out + simdgroup * 337 + 64, 9, ulong2(1, 0), true);
  simdgroup_float8x8 filled[2] = {make_filled_simdgroup_matrix<float, 8, 8>(1.0f),
                                  make_filled_simdgroup_matrix<float, 8, 8>(2.0f)};
  simdgroup_multiply_accumulate(filled[1], ma, filled[0], filled[1]);
  simdgroup_store(filled[1], out + simdgroup * 337 + 145, 8);
  simdgroup_float8x8 mg = mb, mh = ma;
  simdgroup_multiply(mg, ma, mg);
  simdgroup_multiply_accumulate(mh, mh, mb, mc);
  simdgroup_store(mg, out + simdgroup * 337 + 209, 8);
  simdgroup_store(mh, out + simdgroup * 337 + 273, 8);
  lanes[lid * 2] = md.thread_elements()[0];
  lanes[lid * 2 + 1] = md.thread_elements()[1];
}
"""


def fragment_of_lane(lane):
    """Metal's thread_elements() layout: the row and first column of a lane's two elements."""
    quad = lane // 4
    return (quad & 4) + (lane // 2) % 4, (quad & 2) * 2 + (lane % 2) * 2


def multiply_in_order(a, b, c):
    """c + a[:, 0] b[0] + ... + a[:, 7] b[7], rounded to float32 after every step (Metal's order on
    both CPU paths)."""
    d = c.astype(np.float32)
    for k in range(8):
        d = d + np.outer(a[:, k], b[k]).astype(np.float32)
    return d


@pytest.mark.parametrize("threads", [64, 48])  # two full simdgroups; a full one and 16 lanes
def test_simdgroup_matrix_layout_and_summation_order(msl, path, threads):
    kernel = msl(MATRIX_SOURCE).kernel("matrix_operations")
    rng = np.random.default_rng(9)
    simdgroups = 2
    a = rng.standard_normal((simdgroups, 10, 11)).astype(np.float32)
    b = rng.standard_normal((simdgroups, 9, 9)).astype(np.float32)
    c = rng.standard_normal((simdgroups, 8, 8)).astype(np.float32)
    out = Tensor.empty([simdgroups * 337])
    out.write(np.full(simdgroups * 337, -99.0, np.float32))
    lanes = Tensor.empty([threads * 2])
    kernel.run({0: device_array(a.ravel()), 1: device_array(b.ravel()), 2: device_array(c.ravel()), 3: out,
                4: lanes}, threads, threads)
    got = out.numpy().reshape(simdgroups, 337)
    got_lanes = lanes.numpy().reshape(threads, 2)
    for s in range(simdgroups):
        active = min(32, threads - 32 * s)
        held = np.zeros((8, 8), bool)  # the elements of lanes that exist (the others read as zero)
        for lane in range(active):
            row, column = fragment_of_lane(lane)
            held[row, column:column + 2] = True
        ma = np.where(held, a[s, 1:9, 2:10], 0).astype(np.float32)
        mb = np.where(held, b[s, 0:8, 1:9].T, 0).astype(np.float32)
        mc = np.where(held, c[s], 0).astype(np.float32)
        d = multiply_in_order(ma, mb, mc)
        e = multiply_in_order(ma, mb, np.zeros((8, 8), np.float32))
        f = multiply_in_order(ma, np.where(held, 1, 0).astype(np.float32), np.where(held, 2, 0).astype(np.float32))
        expected = np.full(337, -99.0, np.float32)
        expected[:64] = np.where(held, d, -99.0).ravel()
        expected[145:209] = np.where(held, f, -99.0).ravel()
        expected[209:273] = np.where(held, e, -99.0).ravel()
        expected[273:] = np.where(held, d, -99.0).ravel()
        e_stored = expected[64:145].reshape(9, 9)
        e_stored[0:8, 1:9] = np.where(held.T, e.T, -99.0)
        np.testing.assert_array_equal(got[s], expected)
        for lane in range(active):
            row, column = fragment_of_lane(lane)
            np.testing.assert_array_equal(got_lanes[32 * s + lane], d[row, column:column + 2])


QUALIFIED_CALL_SOURCE = """
#include <metal_stdlib>
using namespace metal;

struct block_ops {
  static void scale(threadgroup float* values, uint index, float factor) { values[index] *= factor; }
};

// A call through a qualified name at a level with barriers (MLX's `block_sort_t::merge_step(...)`):
// an expression statement, not a declaration of `scale`.
kernel void qualified_call(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
                           uint size [[threads_per_threadgroup]]) {
  threadgroup float shared[64];
  shared[lid] = float(lid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  block_ops::scale(shared, (lid + 1) % size, 2.0f);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[lid] = shared[(lid + 1) % size];
}
"""


def test_a_qualified_call_between_barriers_is_no_declaration(msl, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(QUALIFIED_CALL_SOURCE).kernel("qualified_call")
    assert "kernel 'qualified_call' runs as barrier regions" in capfd.readouterr().err
    out = Tensor.empty([48])
    kernel.run({0: out}, 48, 48)
    np.testing.assert_array_equal(out.numpy(), ((np.arange(48) + 1) % 48) * 2.0)


CONSTANT_POINTER_SOURCE = """
#include <metal_stdlib>
using namespace metal;

// Pointers into the constant address space live across a barrier (per-thread frame members of
// the region form, whose type keeps the pointee const).
kernel void constant_pointers(constant float* edges [[buffer(0)]], device float* out [[buffer(1)]],
                              uint t [[thread_position_in_threadgroup]]) {
  threadgroup float tile[64];
  constant float* shifted = edges + 1;
  constant float* const base = edges;
  const constant float* last = edges + 64;
  tile[t] = shifted[t];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[t] = tile[63 - t] + base[0] + last[0];
}
"""


def test_constant_pointer_locals_keep_the_region_form(msl, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(CONSTANT_POINTER_SOURCE).kernel("constant_pointers")
    assert "kernel 'constant_pointers' runs as barrier regions" in capfd.readouterr().err
    edges = np.arange(65, dtype=np.float32) * 3
    out = Tensor.empty([64])
    kernel.run({0: device_array(edges), 1: out}, 64, 64)
    np.testing.assert_array_equal(out.numpy(), edges[1:][::-1] + edges[0] + edges[64])


GUARDED_MATRIX_SOURCE = """
#include <metal_stdlib>
using namespace metal;

// Per group of two simdgroups, each with its own 8x8 blocks of a and b: whether the group
// multiplies is a per-thread variable holding one value per group (grouped_mm's depth), so the
// simdgroup matrix loads, products and stores under it are under an if on per-thread values,
// as is the second simdgroup's extra accumulation; groups without depth store a transposed.
kernel void guarded_products(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                             device float* out [[buffer(2)]], constant uint& multiplied_groups [[buffer(3)]],
                             uint group [[threadgroup_position_in_grid]],
                             uint lid [[thread_index_in_threadgroup]],
                             uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  threadgroup float staged[2 * 64];
  const uint block = (group * 2 + simdgroup) * 64;
  uint depth = 0;
  if (group < multiplied_groups) depth = 8;
  simdgroup_float8x8 x, y, z;
  simdgroup_load(x, a + block, 8);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (depth > 0) {
    simdgroup_load(y, b + block, 8);
    simdgroup_multiply(z, x, y);
    if (simdgroup == 1) simdgroup_multiply_accumulate(z, x, y, z);
    simdgroup_store(z, staged + simdgroup * 64, 8);
  } else {
    simdgroup_store(x, staged + simdgroup * 64, 8, ulong2(0, 0), true);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[group * 128 + lid] = staged[lid];
  out[group * 128 + 64 + lid] = staged[64 + lid];
}
"""


def test_simdgroup_matrices_under_an_if_on_per_thread_values(msl, path, monkeypatch, capfd):
    """simdgroup_load / multiply / store under an if whose condition names a per-thread variable
    (uniform in fact, as Metal requires) keep the region form: each runs once per simdgroup for
    the lanes of the branch's mask. Before, the kernel fell back to fibers (grouped_mm's
    conditional store cost 30-50x)."""
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(GUARDED_MATRIX_SOURCE).kernel("guarded_products")
    if path == "regions":
        assert "kernel 'guarded_products' runs as barrier regions" in capfd.readouterr().err
    groups, multiplied = 3, 2
    rng = np.random.default_rng(12)
    a = rng.standard_normal((groups, 2, 8, 8)).astype(np.float32)
    b = rng.standard_normal((groups, 2, 8, 8)).astype(np.float32)
    out = Tensor.empty([groups * 128])
    kernel.run({0: device_array(a.ravel()), 1: device_array(b.ravel()), 2: out,
                3: device_array(np.array([multiplied], np.uint32))}, groups * 64, 64)
    got = out.numpy().reshape(groups, 2, 8, 8)
    zeros = np.zeros((8, 8), np.float32)
    for g in range(groups):
        for s in range(2):
            if g < multiplied:
                expected = multiply_in_order(a[g, s], b[g, s], zeros)
                if s == 1:
                    expected = multiply_in_order(a[g, s], b[g, s], expected)
            else:
                expected = a[g, s].T
            np.testing.assert_array_equal(got[g, s], expected, err_msg=f"group {g}, simdgroup {s}")


SCOPES_SOURCE = """
#include <metal_stdlib>
using namespace metal;

// Per-thread names declared again at levels with barriers, each read across a barrier (so each
// is a member of the thread's frame): a block hiding an outer name (`auto`, its type deduced
// next to the outer one's), a sibling block declaring it again, a block hiding a thread
// attribute, and the outer name after them.
kernel void shadowing_blocks(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                             uint gid [[thread_position_in_grid]], uint lid [[thread_index_in_threadgroup]]) {
  threadgroup float shared[64];
  const float v = in[gid];
  shared[lid] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  {
    const auto v = shared[63 - lid] * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    shared[lid] = v + 1.0f;
    const auto half_v = v * 0.5f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid * 5] = v + shared[(lid + 1) % 64];
    out[gid * 5 + 4] = half_v;
  }
  {
    float v = shared[lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    shared[lid] = -v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid * 5 + 1] = v + shared[lid ^ 1];
  }
  {
    const uint lid = 63 - gid % 64;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid * 5 + 2] = shared[lid] + float(lid);
  }
  out[gid * 5 + 3] = v + float(lid);
}

// Group names hiding thread attributes: a constant in a block, and a loop variable around a
// barrier; constants of one name in both branches of an if on a per-thread value (around
// collectives), where the attribute is visible again.
kernel void constants_hiding_attributes(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                                        uint gid [[thread_position_in_grid]],
                                        uint lid [[thread_index_in_threadgroup]],
                                        uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float shared[64];
  shared[lid] = in[gid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  {
    constexpr uint lid = 5;
    out[gid * 3] = shared[lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  float r;
  if (lane % 2 == 0) {
    constexpr float scale = 2.0f;
    r = simd_sum(shared[lid]) * scale;
  } else {
    constexpr float scale = 3.0f;
    r = simd_max(shared[lid]) * scale;
  }
  out[gid * 3 + 1] = r;
  for (uint lane = 0; lane < 2; ++lane) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) shared[0] += float(lane + 1);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid * 3 + 2] = shared[0] + float(lane);
}
"""


def run_scopes_kernel(msl, path, monkeypatch, capfd, name, seed, columns):
    """Runs SCOPES_SOURCE's kernel `name` over 2 groups of 64 threads (checking that the region
    path really runs it as regions); returns its input and its output as [group, thread, column]."""
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    kernel = msl(SCOPES_SOURCE).kernel(name)
    if path == "regions":
        assert f"kernel '{name}' runs as barrier regions" in capfd.readouterr().err
    x = np.random.default_rng(seed).integers(-50, 50, 128).astype(np.float32)
    out = Tensor.empty([128 * columns])
    kernel.run({0: device_array(x), 1: out}, 128, 64)
    return x, out.numpy().reshape(2, 64, columns)


def test_names_declared_again_at_levels_with_barriers(msl, path, monkeypatch, capfd):
    """A block's per-thread name hiding an outer one or a thread attribute, and the same name in
    a sibling block, keep the region form (its threads' code declared both names side by side
    and did not compile: such kernels ran on fibers)."""
    x, got = run_scopes_kernel(msl, path, monkeypatch, capfd, "shadowing_blocks", seed=18, columns=5)
    lid = np.arange(64)
    for g in range(2):
        v = x[g * 64:(g + 1) * 64]
        doubled = v[63 - lid] * 2
        np.testing.assert_array_equal(got[g, :, 0], doubled + doubled[(lid + 1) % 64] + 1)
        np.testing.assert_array_equal(got[g, :, 4], doubled * 0.5)
        second = doubled + 1
        np.testing.assert_array_equal(got[g, :, 1], second - second[lid ^ 1])
        np.testing.assert_array_equal(got[g, :, 2], -second[63 - lid] + (63 - lid))
        np.testing.assert_array_equal(got[g, :, 3], v + lid)


def test_group_constants_hiding_thread_attributes(msl, path, monkeypatch, capfd):
    """A constant or loop variable named like a thread attribute is what the kernel reads where
    it is in scope (the region form's per-thread attribute declarations hid it again)."""
    x, got = run_scopes_kernel(msl, path, monkeypatch, capfd, "constants_hiding_attributes", seed=19, columns=3)
    lane = np.arange(64) % 32
    for g in range(2):
        v = x[g * 64:(g + 1) * 64]
        np.testing.assert_array_equal(got[g, :, 0], np.full(64, v[5]))
        expected = np.empty(64, np.float32)
        for s in range(2):
            lanes = v[s * 32:(s + 1) * 32]
            expected[s * 32:(s + 1) * 32:2] = lane_order_sum(lanes[0::2]) * 2
            expected[s * 32 + 1:(s + 1) * 32:2] = lanes[1::2].max() * 3
        np.testing.assert_array_equal(got[g, :, 1], expected)
        np.testing.assert_array_equal(got[g, :, 2], v[0] + 3 + lane)
