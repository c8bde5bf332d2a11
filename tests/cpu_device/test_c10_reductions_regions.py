"""Inductor's reductions on barrier regions: c10::metal::threadgroup_sum / prod / max / min / argmax /
argmin / welford_reduce / welford_combine (and ATen's group norm's threadgroup_sum2), called from kernels whose source inlines torch's c10/metal headers (as
Inductor's generated MSL does), with `auto` values live across the call. Each kernel runs on
both paths and must give the same bits on both, and the numpy result."""

import re

import numpy as np
import pytest
import torch

from cpu_device_testing import device_array
from etmetal_py.tensors import Tensor

PATHS = ["regions", "fibers"]
C10_METAL = __import__("pathlib").Path(torch.__file__).parent / "include" / "c10" / "metal"


def inlined_c10_headers():
    """common.h, utils.h and reduction_utils.h as text, their own includes of each other dropped."""
    text = ""
    for name in ("common.h", "utils.h", "reduction_utils.h"):
        body = (C10_METAL / name).read_text()
        text += re.sub(r"#include <c10/metal/[a-z_]+\.h>", "", body.replace("#pragma once", "")) + "\n"
    return text


KERNELS = r"""
// One row per group of `width` threads (dispatched as [rows, width] with groups [1, width]);
// rows past `rows` return before the reduction, as Inductor's bounds checks do.
kernel void row_sum(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                    constant uint& rows [[buffer(2)]], uint2 thread_pos [[thread_position_in_grid]],
                    uint2 group_pos [[thread_position_in_threadgroup]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[32];
    if (x0 >= rows) return;
    auto tmp0 = in[r0_index + size.y * x0];
    auto tmp1 = tmp0 * tmp0;
    auto tmp2 = c10::metal::threadgroup_sum(tmp_acc_0, tmp1, r0_index * 1, size.y);
    auto tmp3 = tmp0 / tmp2;
    out[r0_index + size.y * x0] = tmp3;
}

kernel void row_long_sum(device long* out [[buffer(0)]], device const long* in [[buffer(1)]],
                         uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup long tmp_acc_0[32];
    auto tmp0 = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_sum(tmp_acc_0, tmp0, r0_index, size.y);
    if (r0_index == 0) out[x0] = tmp1;
}

kernel void row_extremes(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                         uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[32];
    threadgroup float tmp_acc_1[32];
    auto tmp0 = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_max(tmp_acc_0, tmp0, r0_index, size.y);
    auto tmp2 = c10::metal::threadgroup_min(tmp_acc_1, tmp0, r0_index, size.y);
    if (r0_index == 0) {
        out[2 * x0] = tmp1;
        out[2 * x0 + 1] = tmp2;
    }
}

// Each reduction has its own accumulators, as Inductor allocates them: c10's reductions end
// with every thread reading the result from them, which a reused one's next stores would race.
kernel void row_arg_extremes(device long* out [[buffer(0)]], device const float* in [[buffer(1)]],
                             uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[32];
    threadgroup long tmp_acc_1[32];
    threadgroup float tmp_acc_2[32];
    threadgroup long tmp_acc_3[32];
    auto tmp0 = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_argmax(tmp_acc_0, tmp_acc_1, tmp0, static_cast<long>(r0_index), r0_index, size.y);
    auto tmp2 = c10::metal::threadgroup_argmin(tmp_acc_2, tmp_acc_3, tmp0, static_cast<long>(r0_index), r0_index, size.y);
    if (r0_index == 0) {
        out[2 * x0] = tmp1;
        out[2 * x0 + 1] = tmp2;
    }
}

kernel void row_normalize(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                          uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[1024];
    auto tmp0 = in[r0_index + size.y * x0];
    tmp_acc_0[r0_index] = tmp0;
    auto tmp1 = c10::metal::threadgroup_welford_reduce(tmp_acc_0, size.y);
    auto tmp2 = tmp1.y / size.y;
    auto tmp3 = (tmp0 - tmp1.x) * metal::precise::rsqrt(tmp2 + 1e-5);
    out[r0_index + size.y * x0] = tmp3;
}

// Welford over a prefix of each row, its length varying by row: the groups a worker runs side
// by side hand over chains of different lengths; rows past `rows` return before the reduction.
kernel void row_prefix_welford(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                               constant uint& rows [[buffer(2)]], uint2 thread_pos [[thread_position_in_grid]],
                               uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[1024];
    if (x0 >= rows) return;
    tmp_acc_0[r0_index] = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_welford_reduce(tmp_acc_0, 1 + (x0 * 5) % size.y);
    if (r0_index == 0) {
        out[3 * x0] = tmp1.x;
        out[3 * x0 + 1] = tmp1.y;
        out[3 * x0 + 2] = tmp1.z;
    }
}

// Row 5's first thread writes far past its buffer after the reduction, while groups beside it
// wait for their chains or resume.
kernel void row_welford_stray(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                              uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[1024];
    tmp_acc_0[r0_index] = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_welford_reduce(tmp_acc_0, size.y);
    out[r0_index + size.y * x0 + (x0 == 5 && r0_index == 0 ? (1ul << 40) : 0)] = tmp1.x;
}

// Inductor's group norm: each thread folds 4 values into a (mean, m2, weight) triple, then
// threadgroup_welford_combine folds the group's triples.
kernel void row_combine(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                        uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float3 tmp_acc_0[1024];
    tmp_acc_0[r0_index] = 0.0;
    for (auto r0__cnt = 0; r0__cnt < 4; ++r0__cnt) {
        auto tmp0 = in[4 * r0_index + r0__cnt + 4 * size.y * x0];
        tmp_acc_0[r0_index] = ::c10::metal::welford_combine(tmp_acc_0[r0_index], float3(tmp0, 0.0, 1.0));
    }
    auto tmp1 = c10::metal::threadgroup_welford_combine(tmp_acc_0, size.y);
    for (auto r0__cnt = 0; r0__cnt < 4; ++r0__cnt) {
        auto index = 4 * r0_index + r0__cnt + 4 * size.y * x0;
        out[index] = (in[index] - tmp1.x) * metal::precise::rsqrt(tmp1.y / tmp1.z + 1e-5);
    }
}

kernel void row_prod(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                     uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float tmp_acc_0[4];
    auto tmp0 = in[r0_index + size.y * x0];
    auto tmp1 = c10::metal::threadgroup_prod(tmp_acc_0, tmp0, r0_index * 1, size.y);
    out[r0_index + size.y * x0] = tmp0 * tmp1;
}

kernel void row_long_prod(device long* out [[buffer(0)]], device const long* in [[buffer(1)]],
                          uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup long tmp_acc_0[4];
    auto tmp1 = c10::metal::threadgroup_prod(tmp_acc_0, in[r0_index + size.y * x0], r0_index, size.y);
    if (r0_index == 0) out[x0] = tmp1;
}

// ATen's group norm: the sum and the sum of squares in one call.
kernel void row_sum2(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                     uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    auto x0 = thread_pos.x;
    auto r0_index = thread_pos.y;
    threadgroup float local_sums[32];
    threadgroup float local_sums_sq[32];
    auto v = in[r0_index + size.y * x0];
    auto sums = c10::metal::threadgroup_sum2(local_sums, local_sums_sq, v, v * v, r0_index, size.y);
    if (r0_index == 0) {
        out[2 * x0] = sums[0];
        out[2 * x0 + 1] = sums[1];
    }
}
"""

# c10's complex simd_prod leaves each lane its own value: no region form stands for it.
COMPLEX_PROD = r"""
kernel void row_complex_prod(device float2* out [[buffer(0)]], device const float2* in [[buffer(1)]],
                             uint2 thread_pos [[thread_position_in_grid]], uint2 size [[threads_per_threadgroup]]) {
    threadgroup float2 tmp_acc_0[1];
    auto tmp0 = in[thread_pos.y + size.y * thread_pos.x];
    auto tmp1 = c10::metal::threadgroup_prod(tmp_acc_0, tmp0, thread_pos.y, size.y);
    if (thread_pos.y == 0) out[thread_pos.x] = tmp1;
}
"""

SOURCE = "#include <metal_stdlib>\n" + inlined_c10_headers() + KERNELS


def run_on_paths(msl, monkeypatch, name, make_arguments, grid, group):
    results = []
    for path in PATHS:
        monkeypatch.setenv("ETMETAL_CPU_EXECUTION", path)
        arguments, outputs = make_arguments()
        msl(SOURCE).kernel(name).run(arguments, grid, group)
        results.append([o.numpy() for o in outputs])
    for regions, fibers in zip(*results):
        np.testing.assert_array_equal(regions.view(np.uint8), fibers.view(np.uint8))
    return results[0]


WIDTHS = [16, 100]  # one partial simdgroup; three full and one of 4 lanes (two stages)


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_sum(msl, monkeypatch, width):
    rows = 5
    x = np.random.default_rng(width).uniform(-2, 2, (rows, width)).astype(np.float32)

    def arguments():
        out = Tensor.empty([(rows + 1) * width])
        out.write(np.full((rows + 1) * width, 7.0, np.float32))
        count = device_array(np.array([rows], np.uint32))
        padded = np.concatenate([x.ravel(), np.zeros(width, np.float32)])
        return {0: out, 1: device_array(padded), 2: count}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_sum", arguments, (rows + 1, width), (1, width))
    out = out.reshape(rows + 1, width)
    np.testing.assert_allclose(out[:rows], x / (x * x).sum(1, keepdims=True), rtol=1e-5)
    assert (out[rows] == 7.0).all()  # the row whose threads all returned


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_sum_of_int64(msl, monkeypatch, width):
    rows = 3
    wide = ((1 << 40) + np.arange(rows * width, dtype=np.int64) * 977).reshape(rows, width)

    def arguments():
        out = Tensor.empty([rows], dtype=np.int64)
        return {0: out, 1: device_array(wide.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_long_sum", arguments, (rows, width), (1, width))
    assert out.tolist() == wide.sum(1).tolist()


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_max_min_and_nan(msl, monkeypatch, width):
    rows = 3
    x = np.random.default_rng(width + 1).uniform(-9, 9, (rows, width)).astype(np.float32)
    x[1, width // 2] = np.nan

    def arguments():
        out = Tensor.empty([rows * 2])
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_extremes", arguments, (rows, width), (1, width))
    out = out.reshape(rows, 2)
    for r in (0, 2):
        assert out[r, 0] == x[r].max() and out[r, 1] == x[r].min()
    assert np.isnan(out[1]).all()


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_argmax_argmin(msl, monkeypatch, width):
    rows = 4
    x = np.random.default_rng(width + 2).integers(-50, 50, (rows, width)).astype(np.float32)

    def arguments():
        out = Tensor.empty([rows * 2], dtype=np.int64)
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_arg_extremes", arguments, (rows, width), (1, width))
    out = out.reshape(rows, 2)
    if width <= 32:
        np.testing.assert_array_equal(out[:, 0], x.argmax(1))
        np.testing.assert_array_equal(out[:, 1], x.argmin(1))
    else:
        # c10's second stage keeps the first simdgroup holding the extreme
        for r in range(rows):
            assert x[r, out[r, 0]] == x[r].max() and x[r, out[r, 1]] == x[r].min()


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_welford_reduce(msl, monkeypatch, width):
    rows = 3
    x = np.random.default_rng(width + 3).normal(size=(rows, width)).astype(np.float32)

    def arguments():
        out = Tensor.empty([rows * width])
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_normalize", arguments, (rows, width), (1, width))
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.reshape(rows, width), expected, rtol=1e-4, atol=1e-4)


def test_threadgroup_welford_reduce_of_many_groups(msl, monkeypatch):
    """More groups than a worker runs side by side, chains of different lengths among them."""
    rows, width = 37, 100
    x = np.random.default_rng(7).normal(1.0, 2.0, size=(rows, width)).astype(np.float32)

    def arguments():
        out = Tensor.empty([(rows + 3) * 3])
        out.write(np.full((rows + 3) * 3, 7.0, np.float32))
        padded = np.concatenate([x.ravel(), np.zeros(3 * width, np.float32)])
        return {0: out, 1: device_array(padded), 2: device_array(np.array([rows], np.uint32))}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_prefix_welford", arguments, (rows + 3, width), (1, width))
    out = out.reshape(rows + 3, 3)
    for r in range(rows):
        n = 1 + (r * 5) % width
        np.testing.assert_allclose(out[r, 0], x[r, :n].mean(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[r, 1], n * x[r, :n].var(), rtol=1e-4, atol=1e-4)
        assert out[r, 2] == n
    assert (out[rows:] == 7.0).all()  # the rows whose threads all returned


def test_a_fault_among_groups_run_side_by_side_fails_the_dispatch_and_names_its_group(msl, monkeypatch):
    monkeypatch.setenv("ETMETAL_CPU_EXECUTION", "regions")
    rows, width = 12, 64
    x = np.random.default_rng(8).normal(size=(rows, width)).astype(np.float32)
    library = msl(SOURCE)
    message = library.kernel("row_welford_stray").run_expecting_error(
        {0: Tensor.empty([rows * width]), 1: device_array(x.ravel())}, (rows, width), (1, width))
    assert "invalid memory access" in message and "in threadgroup (5, 0, 0)" in message, message
    # The worker's groups side by side start afresh: the next dispatch runs them all.
    out = Tensor.empty([rows * width])
    library.kernel("row_normalize").run({0: out, 1: device_array(x.ravel())}, (rows, width), (1, width))
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy().reshape(rows, width), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_welford_combine(msl, monkeypatch, width):
    rows = 3
    x = np.random.default_rng(width + 4).normal(2.0, 3.0, size=(rows, 4 * width)).astype(np.float32)

    def arguments():
        out = Tensor.empty([rows * 4 * width])
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_combine", arguments, (rows, width), (1, width))
    expected = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.reshape(rows, 4 * width), expected, rtol=1e-4, atol=1e-4)


def c10_fold(values, combine):
    """c10's two-stage reduction of one row in float32: lanes 0..31 of each simdgroup folded in
    lane order (the CPU device's simd_sum / simd_product), then the simdgroups' results in order."""
    def fold(items):
        result = items[0]
        for item in items[1:]:
            result = combine(result, item)
        return result

    partials = [fold(list(values[g:g + 32])) for g in range(0, len(values), 32)]
    return fold(partials)


def tree_fold(values, combine):
    """The same values folded as a butterfly tree (another order a SIMD reduction could use)."""
    items = list(values)
    while len(items) > 1:
        items = [combine(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


def order_sensitive_rows(make, combine):
    """Rows from make() (float32) in which the lane-order and tree-order folds of some row differ:
    a kernel folding in another order than the fiber path's gives other bits."""
    for _ in range(20):
        x = make().astype(np.float32)
        if any(c10_fold(r, combine) != tree_fold(r, combine) for r in x):
            return x
    raise AssertionError("no order-sensitive input found")


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_prod_folds_in_lane_order(msl, monkeypatch, width):
    rows = 6
    rng = np.random.default_rng(width + 5)
    x = order_sensitive_rows(lambda: rng.uniform(0.8, 1.25, (rows, width)), np.multiply)

    def arguments():
        out = Tensor.empty([rows * width])
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_prod", arguments, (rows, width), (1, width))
    products = np.array([c10_fold(r, np.multiply) for r in x], np.float32)
    np.testing.assert_array_equal(out.reshape(rows, width), x * products[:, None])
    np.testing.assert_allclose(products, np.prod(x.astype(np.float64), 1), rtol=1e-4)


@pytest.mark.parametrize("width", [32, 100])
def test_threadgroup_prod_of_int64(msl, monkeypatch, width):
    rows = 3
    wide = np.random.default_rng(width + 6).integers(-(1 << 20), 1 << 20, (rows, width)).astype(np.int64) | 1

    def arguments():
        out = Tensor.empty([rows], dtype=np.int64)
        return {0: out, 1: device_array(wide.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_long_prod", arguments, (rows, width), (1, width))
    if width == 32:
        with np.errstate(over="ignore"):
            assert out.tolist() == np.prod(wide, 1).tolist()  # wraps around as Metal's long does
    else:
        # c10's 64-bit simd_prod is a shuffle_and_fill_down tree; its second stage, with fewer
        # than 32 lanes taking part, multiplies by lanes that did not (zero bits)
        assert out.tolist() == [0] * rows


@pytest.mark.parametrize("width", WIDTHS)
def test_threadgroup_sum2_folds_in_lane_order(msl, monkeypatch, width):
    rows = 5
    rng = np.random.default_rng(width + 7)
    x = order_sensitive_rows(lambda: rng.uniform(-1, 1, (rows, width)) * 10.0 ** rng.uniform(-3, 3, (rows, width)),
                             np.add)
    squares = x * x

    def arguments():
        out = Tensor.empty([rows * 2])
        return {0: out, 1: device_array(x.ravel())}, [out]

    (out,) = run_on_paths(msl, monkeypatch, "row_sum2", arguments, (rows, width), (1, width))
    expected = [[c10_fold(r, np.add), c10_fold(s, np.add)] for r, s in zip(x, squares)]
    np.testing.assert_array_equal(out.reshape(rows, 2), np.array(expected, np.float32))


def test_threadgroup_prod_of_complex_values_runs_on_fibers(msl, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    rows, width = 2, 32
    x = np.random.default_rng(8).uniform(0.9, 1.1, (rows, width, 2)).astype(np.float32)
    out = Tensor.empty([rows * 2])
    msl("#include <metal_stdlib>\n" + inlined_c10_headers() + COMPLEX_PROD).kernel("row_complex_prod").run(
        {0: out, 1: device_array(x.ravel())}, (rows, width), (1, width))
    assert "kernel 'row_complex_prod' runs as fibers" in capfd.readouterr().err
    products = np.prod(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=1)
    np.testing.assert_allclose(out.numpy().reshape(rows, 2), np.stack([products.real, products.imag], 1), rtol=1e-5)


def test_the_reductions_run_as_barrier_regions(msl, monkeypatch, capfd):
    monkeypatch.setenv("ETMETAL_LOG", "debug")
    library = msl(SOURCE)
    names = ("row_sum", "row_long_sum", "row_extremes", "row_arg_extremes", "row_normalize", "row_combine",
             "row_prod", "row_long_prod", "row_sum2")
    for name in names:
        library.kernel(name)
    err = capfd.readouterr().err
    for name in names:
        assert f"kernel '{name}' runs as barrier regions" in err, err
