"""MSL kernels run by the CPU device, checked against numpy and hand-computed values:
argument binding, thread attributes, partial threadgroups, barriers with threadgroup memory,
SIMD-group collectives with inactive lanes, templates and [[host_name]] instantiations."""

import itertools
import os

import numpy as np
import pytest

from cpu_device_testing import device_array
from etmetal_py.tensors import Tensor

# Inductor's kernels: no attributes but the thread position, so buffers bind by position.
POSITIONAL = """
#include <metal_stdlib>
using namespace metal;
kernel void generated_kernel(device float* out_ptr0, constant float* in_ptr0,
                             constant float* in_ptr1, constant long& ks0,
                             constant float& alpha, uint xindex [[thread_position_in_grid]]) {
  if (long(xindex) >= ks0) return;
  auto tmp0 = in_ptr0[xindex];
  auto tmp1 = in_ptr1[xindex] * alpha;
  out_ptr0[xindex] = tmp0 + tmp1 + 0.5;
}
"""


def test_positional_arguments_and_scalar_references(msl):
    kernel = msl(POSITIONAL).kernel("generated_kernel")
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1000).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    out = Tensor.empty([1000])
    out.write(np.full(1000, -7.0, np.float32))
    # 1000 threads in groups of 128: the last group is partial; ks0 stops at 900.
    kernel.run({0: out, 1: device_array(a), 2: device_array(b), 3: 900,
                4: device_array(np.float32([1.5]))}, 1000, 128)
    expected = np.where(np.arange(1000) < 900, a + b * np.float32(1.5) + np.float32(0.5), -7.0)
    np.testing.assert_array_equal(out.numpy(), expected.astype(np.float32))


BUFFER_INDICES = """
#include <metal_stdlib>
using namespace metal;
struct Params { float scale; int offset; };
kernel void scatter_scaled(device float* out [[buffer(2)]],
                           constant Params& p [[buffer(0)]],
                           device const float* src [[buffer(3)]],
                           constant int64_t strides[2] [[buffer(1)]],
                           uint2 pos [[thread_position_in_grid]]) {
  out[pos.y * strides[0] + pos.x * strides[1]] = src[pos.y * 8 + pos.x] * p.scale + p.offset;
}
"""


def test_buffer_attributes_bind_by_index(msl):
    kernel = msl(BUFFER_INDICES).kernel("scatter_scaled")
    src = np.arange(48, dtype=np.float32).reshape(6, 8)
    params = np.zeros(2, np.float32)
    params[0] = 0.25
    params.view(np.int32)[1] = -3
    out = Tensor.empty([8, 6])
    # out is written transposed: strides (1, 6).
    kernel.run({0: device_array(params), 1: device_array(np.int64([1, 6])), 2: out,
                3: device_array(src)}, (8, 6), (4, 4))
    np.testing.assert_array_equal(out.numpy(), (src * 0.25 - 3).T)


ATTRIBUTES = """
#include <metal_stdlib>
using namespace metal;
kernel void attributes(device uint* out [[buffer(0)]],
                       uint3 grid_position [[thread_position_in_grid]],
                       ushort3 local_position [[thread_position_in_threadgroup]],
                       uint3 group_position [[threadgroup_position_in_grid]],
                       uint3 group_size [[threads_per_threadgroup]],
                       uint3 grid_size [[threads_per_grid]],
                       uint3 group_count [[threadgroups_per_grid]],
                       uint local_index [[thread_index_in_threadgroup]],
                       ushort lane [[thread_index_in_simdgroup]],
                       uint simdgroup [[simdgroup_index_in_threadgroup]],
                       uint simdgroups [[simdgroups_per_threadgroup]],
                       uint simd_width [[threads_per_simdgroup]],
                       uint execution_width [[thread_execution_width]],
                       ushort quad_lane [[thread_index_in_quadgroup]],
                       uint quadgroup [[quadgroup_index_in_threadgroup]],
                       uint quadgroups [[quadgroups_per_threadgroup]],
                       ushort2 grid_position_xy [[thread_position_in_grid]],
                       uint3 requested_size [[dispatch_threads_per_threadgroup]]) {
  %(prologue)s
  const uint id = grid_position.x + grid_size.x * (grid_position.y + grid_size.y * grid_position.z);
  device uint* o = out + id * 32;
  o[0] = grid_position.x; o[1] = grid_position.y; o[2] = grid_position.z;
  o[3] = local_position.x; o[4] = local_position.y; o[5] = local_position.z;
  o[6] = group_position.x; o[7] = group_position.y; o[8] = group_position.z;
  o[9] = group_size.x; o[10] = group_size.y; o[11] = group_size.z;
  o[12] = grid_size.x; o[13] = grid_size.y; o[14] = grid_size.z;
  o[15] = group_count.x; o[16] = group_count.y; o[17] = group_count.z;
  o[18] = local_index; o[19] = lane; o[20] = simdgroup; o[21] = simdgroups;
  o[22] = simd_width; o[23] = execution_width; o[24] = quad_lane; o[25] = quadgroup;
  o[26] = quadgroups; o[27] = grid_position_xy.x; o[28] = grid_position_xy.y;
  o[29] = requested_size.x; o[30] = requested_size.y; o[31] = requested_size.z;
}
"""


def expected_attributes(grid, group):
    """Metal's values for a dispatchThreads grid: edge threadgroups are smaller."""
    counts = [-(-g // t) for g, t in zip(grid, group)]
    out = np.zeros((grid[2], grid[1], grid[0], 32), np.uint32)
    for z, y, x in itertools.product(range(grid[2]), range(grid[1]), range(grid[0])):
        position = (x, y, z)
        group_position = [p // t for p, t in zip(position, group)]
        local = [p % t for p, t in zip(position, group)]
        size = [min(t, g - gp * t) for t, g, gp in zip(group, grid, group_position)]
        threads = size[0] * size[1] * size[2]
        index = local[0] + size[0] * (local[1] + size[1] * local[2])
        out[z, y, x] = (list(position) + local + group_position + size + list(grid) + counts +
                        [index, index % 32, index // 32, -(-threads // 32), 32, 32, index % 4,
                         index // 4, -(-threads // 4), x, y] + list(group))
    return out.reshape(-1, 32)


@pytest.mark.parametrize("prologue", ["", "threadgroup_barrier(mem_flags::mem_none);"],
                         ids=["loop-path", "fiber-path"])
def test_every_thread_attribute_with_partial_threadgroups(msl, prologue):
    kernel = msl(ATTRIBUTES % {"prologue": prologue}).kernel("attributes")
    grid, group = (13, 6, 3), (8, 4, 2)  # partial groups on every axis; 2 simdgroups per full group
    out = Tensor.empty([13 * 6 * 3 * 32], dtype=np.int32)
    out.write(np.full(13 * 6 * 3 * 32, -1, np.int32))
    kernel.run({0: out}, grid, group)
    got = out.numpy().view(np.uint32).reshape(-1, 32)
    np.testing.assert_array_equal(got, expected_attributes(grid, group))


TREE_REDUCTION = """
#include <metal_stdlib>
using namespace metal;
// Helpers and barriers outside the kernel body: the executor decides from the compiled code.
inline void sync_group() { threadgroup_barrier(mem_flags::mem_threadgroup); }

kernel void group_sums(device const float* in [[buffer(0)]], device float* sums [[buffer(1)]],
                       uint gid [[thread_position_in_grid]],
                       uint lid [[thread_index_in_threadgroup]],
                       uint group [[threadgroup_position_in_grid]],
                       uint count [[threads_per_threadgroup]]) {
  threadgroup float partial[256], spare[4];
  partial[lid] = in[gid];
  if (lid == 0) spare[1] = float(count);
  sync_group();
  for (uint stride = 128; stride > 0; stride /= 2) {
    if (lid < stride && lid + stride < count) partial[lid] += partial[lid + stride];
    sync_group();
  }
  if (lid == count - 1) {
    sums[2 * group] = partial[0];
    sums[2 * group + 1] = spare[1];
  }
}
"""


def test_barriers_and_threadgroup_memory_tree_reduction(msl):
    kernel = msl(TREE_REDUCTION).kernel("group_sums")
    n = 256 * 37 + 45  # the last threadgroup has 45 threads
    data = np.random.default_rng(1).integers(-50, 50, n).astype(np.float32)
    groups = -(-n // 256)
    sums = Tensor.empty([2 * groups])
    kernel.run({0: device_array(data), 1: sums}, n, 256)
    got = sums.numpy().reshape(groups, 2)
    bounds = np.arange(0, n, 256)
    np.testing.assert_array_equal(got[:, 0], np.add.reduceat(data, bounds))
    np.testing.assert_array_equal(got[:, 1], np.minimum(256, n - bounds))


SIMD = """
#include <metal_stdlib>
using namespace metal;
kernel void simd_ops(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                     constant uint& cutoff [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint lane [[thread_index_in_simdgroup]]) {
  const float v = in[gid];
  if (lane >= cutoff) return;  // these lanes take no part in the collectives below
  out[gid * 6 + 0] = simd_sum(v);
  out[gid * 6 + 1] = simd_prefix_exclusive_sum(v);
  out[gid * 6 + 2] = simd_max(v);
  out[gid * 6 + 3] = float(popcount(static_cast<ulong>(simd_ballot(v > 0.0f))));
  out[gid * 6 + 4] = simd_shuffle_down(v, 1);
  // Two call sites are two collectives, each among the lanes that reach it.
  if (lane % 2 == 0) {
    out[gid * 6 + 5] = simd_sum(v);
  } else {
    out[gid * 6 + 5] = simd_sum(v * 10.0f);
  }
}
"""


def expected_simd(values, group, cutoff):
    n = len(values)
    out = np.full((n, 6), np.nan, np.float32)
    for start in range(0, n, group):
        size = min(group, n - start)
        for base in range(start, start + size, 32):
            lanes = [base + lane for lane in range(min(32, start + size - base)) if lane < cutoff]
            v = values[lanes]
            evens, odds = lanes[0::2], lanes[1::2]
            for k, gid in enumerate(lanes):
                # shuffle_down past lane 31 keeps the own value; from an inactive or missing
                # lane it reads zero bits.
                down = gid + 1
                shuffled = (values[gid] if gid - base + 1 >= 32
                            else values[down] if down in lanes else 0.0)
                out[gid] = [v.sum(), v[:k].sum(), v.max(), (v > 0).sum(), shuffled,
                            values[evens].sum() if k % 2 == 0 else (values[odds] * 10).sum()]
    return out


@pytest.mark.parametrize("cutoff", [32, 19])
def test_simd_collectives_with_inactive_and_missing_lanes(msl, cutoff):
    kernel = msl(SIMD).kernel("simd_ops")
    n = 96 * 3 + 41  # groups of 96 threads; the last has 41: a partial simdgroup of 9 lanes
    values = np.random.default_rng(2).integers(-20, 20, n).astype(np.float32)
    out = Tensor.empty([n * 6])
    out.write(np.full(n * 6, np.nan, np.float32))
    kernel.run({0: device_array(values), 1: out, 2: cutoff}, n, 96)
    np.testing.assert_array_equal(out.numpy().reshape(n, 6), expected_simd(values, 96, cutoff))


TEMPLATES = """
#include <metal_stdlib>
using namespace metal;

template <typename T, int Scale>
kernel void scale_copy(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]]) {
  out[i] = in[i] * T(Scale);
}

#define INSTANTIATE_SCALE(T, S)                                           \\
  template [[host_name("scale_copy_" #T "_" #S)]] kernel void scale_copy<T, S>( \\
      device const T*, device T*, uint);
INSTANTIATE_SCALE(float, 2)
INSTANTIATE_SCALE(int, 3)

template [[host_name("scale_copy_half_4")]] [[kernel]] decltype(scale_copy<half, 4>)
    scale_copy<half, 4>;

namespace shapes {
struct Box { float width; };
template <typename T>
[[kernel, max_total_threads_per_threadgroup(64)]] void widen(device T* x [[buffer(0)]],
                                                             constant Box& box [[buffer(1)]],
                                                             uint i [[thread_position_in_grid]],
                                                             uint group [[threads_per_threadgroup]]);
}  // namespace shapes

template <typename T>
[[kernel]] void shapes::widen(device T* x [[buffer(0)]], constant Box& box [[buffer(1)]],
                              uint i [[thread_position_in_grid]],
                              uint group [[threads_per_threadgroup]]) {
  x[i] = x[i] * box.width + T(group);
}
template [[host_name("widen_float")]] kernel void ::shapes::widen<float>(
    device float*, constant shapes::Box&, uint, uint);
"""


def test_templates_and_host_name_instantiations(msl):
    library = msl(TEMPLATES)
    values = np.arange(-5, 95)
    for name, dtype, factor in (("scale_copy_float_2", np.float32, 2),
                                ("scale_copy_int_3", np.int32, 3),
                                ("scale_copy_half_4", np.float16, 4)):
        out = Tensor.empty([100], dtype=dtype)
        library.kernel(name).run({0: device_array(values.astype(dtype)), 1: out}, 100, 32)
        np.testing.assert_array_equal(out.numpy(), (values * factor).astype(dtype))

    # A declared-then-defined kernel template in a namespace, with a threadgroup cap: the
    # default threadgroup is min(length, 64).
    widen = library.kernel("widen_float")
    x = device_array(np.ones(100, np.float32))
    widen.run({0: x, 1: device_array(np.float32([3.0]))}, 100)
    np.testing.assert_array_equal(x.numpy(), np.where(np.arange(100) < 64, 67.0, 3.0 + 36.0))
    message = widen.run_expecting_error({0: x, 1: device_array(np.float32([3.0]))}, 100, 128)
    assert "maximum of 64" in message


def test_kernel_that_needs_fibers_fails_loudly_on_the_loop_path(msl, monkeypatch):
    monkeypatch.setenv("ETMETAL_CPU_EXECUTION", "loop")
    kernel = msl(TREE_REDUCTION).kernel("group_sums")
    message = kernel.run_expecting_error(
        {0: device_array(np.ones(512, np.float32)), 1: Tensor.empty([4])}, 512, 256)
    assert "threadgroup_barrier" in message and "loop path" in message


def test_loop_path_elementwise_matches_numpy_on_a_large_grid(msl):
    kernel = msl(POSITIONAL).kernel("generated_kernel")
    n = (1 << 20) + 3
    rng = np.random.default_rng(3)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = Tensor.empty([n])
    kernel.run({0: out, 1: device_array(a), 2: device_array(b), 3: n,
                4: device_array(np.float32([-2.0]))}, n)
    np.testing.assert_array_equal(out.numpy(), a + b * np.float32(-2.0) + np.float32(0.5))


# Inductor's SiLU and softmax numerators: exp inlined into the loop over the threads, which
# g++ vectorises; a grid of partial groups, so the vector loop's epilogue runs too.
EXPONENTIALS = """
#include <metal_stdlib>
using namespace metal;
kernel void generated_kernel(device float* out_ptr0, device float* out_ptr1, device float* out_ptr2,
                             const device float* in_ptr0, const device float* in_ptr1,
                             uint xindex [[thread_position_in_grid]]) {
  int x0 = xindex;
  int x1 = x0 / 64;
  auto tmp0 = in_ptr0[x0];
  auto tmp2 = metal::precise::exp(static_cast<decltype(tmp0)>(-tmp0));
  out_ptr0[x0] = static_cast<float>(tmp0 / (tmp2 + 1.0));
  out_ptr1[x0] = metal::precise::exp(tmp0 - in_ptr1[x1]);
  out_ptr2[x0] = metal::exp2(tmp0) + metal::exp10(tmp0 * 0.25f);
}
"""


def test_loop_path_exponentials_match_numpy(msl):
    kernel = msl(EXPONENTIALS).kernel("generated_kernel")
    n = 64 * 300 + 37
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 30).astype(np.float32)
    x[:12] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.8, 89.0, -103.0, -87.5, 128.0, -149.5, 1e-30]
    shift = rng.uniform(-5, 5, -(-n // 64)).astype(np.float32)
    outputs = [Tensor.empty([n]) for _ in range(3)]
    kernel.run({0: outputs[0], 1: outputs[1], 2: outputs[2], 3: device_array(x), 4: device_array(shift)}, n, 100)
    silu, softmax_numerator, powers = (o.numpy() for o in outputs)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        exp_negated = np.exp(-wide).astype(np.float32)  # each float operation rounds once
        expected_silu = x / (exp_negated + np.float32(1.0))
        difference = x - np.repeat(shift, 64)[:n]
        expected_numerator = np.exp(difference.astype(np.float64)).astype(np.float32)
        expected_powers = np.exp2(wide).astype(np.float32) + (10.0 ** (x * np.float32(0.25)).astype(np.float64)).astype(np.float32)
    # exp is correctly rounded but where its polynomial's 2e-10 decides: one ulp at most.
    for got, expected in ((silu, expected_silu), (softmax_numerator, expected_numerator), (powers, expected_powers)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_max_ulp(got[~np.isnan(got)], expected[~np.isnan(expected)], maxulp=1)
