"""MSL kernels that lean on the emulated standard library (vectors and swizzles, half and
bfloat, simd collectives over partial simdgroups, atomics shared by threadgroups on several
workers, simdgroup matrices), compiled and run by the CPU device through etmetal_py."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

etmetal_py = pytest.importorskip("etmetal_py")
from etmetal_py import ffi, lib  # noqa: E402
from etmetal_py.kernels import compile_library  # noqa: E402

SOURCE = r"""
#include <metal_stdlib>
using namespace metal;

// Reverses each float4, doubles its first half through swizzle writes, and packs a checksum
// of the vector into a packed_float3 / half / bfloat round trip.
kernel void vectors(device const float4* in [[buffer(0)]], device float4* out [[buffer(1)]],
                    device packed_float3* packed [[buffer(2)]], device uint* bits [[buffer(3)]],
                    uint i [[thread_position_in_grid]]) {
  float4 v = in[i];
  float4 r = v.wzyx;
  r.xy *= 2.0;
  r.zw = select(r.zw, float2(-1.0), r.zw < 0.0);
  out[i] = r;
  packed[i] = packed_float3(float3(v.xy, dot(v, float4(1.0))));
  half2 h = half2(v.xy);
  bits[i] = as_type<uint>(h) ^ uint(as_type<ushort>(bfloat(v.z)));
}

// Per threadgroup of 64 (the last one partial): sums, scans and ballots over simdgroups whose
// missing lanes are inactive.
kernel void collectives(device const float* in [[buffer(0)]], device float* sums [[buffer(1)]],
                        device float* scans [[buffer(2)]], device ulong* votes [[buffer(3)]],
                        device float* shifted [[buffer(4)]], constant long& n [[buffer(5)]],
                        uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  const float x = in[i];
  sums[i] = simd_sum(x);
  scans[i] = simd_prefix_exclusive_sum(x);
  votes[i] = ulong(simd_ballot(x > 0.0));
  shifted[i] = simd_shuffle_and_fill_down(x, -100.0f, ushort(4));
}

// Every thread adds to shared counters: threadgroups run on several worker threads.
kernel void histogram(device const uint* values [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                      device atomic_float* total [[buffer(2)]], device atomic_int* maximum [[buffer(3)]],
                      uint i [[thread_position_in_grid]]) {
  const uint v = values[i];
  atomic_fetch_add_explicit(&bins[v % 16], 1u, memory_order_relaxed);
  atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
  atomic_fetch_max_explicit(maximum, int(v), memory_order_relaxed);
}

// A threadgroup atomic counter: every thread takes a ticket, the last one records the count.
kernel void tickets(device uint* out [[buffer(0)]], uint lid [[thread_position_in_threadgroup]],
                    uint group [[threadgroup_position_in_grid]], uint size [[threads_per_threadgroup]]) {
  threadgroup atomic_uint counter;
  if (lid == 0) atomic_store_explicit(&counter, 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const uint ticket = atomic_fetch_add_explicit(&counter, 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (ticket == size - 1) out[group] = atomic_load_explicit(&counter, memory_order_relaxed);
}

// C (16x16) = A (16x32) * B (32x16): one simdgroup per 8x8 tile of C, four per threadgroup.
kernel void gemm(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
                 device float* c [[buffer(2)]], uint simdgroup [[simdgroup_index_in_threadgroup]]) {
  const ulong row = (simdgroup / 2) * 8, column = (simdgroup % 2) * 8;
  simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (ulong k = 0; k < 32; k += 8) {
    simdgroup_half8x8 ta, tb;
    simdgroup_load(ta, a, 32, ulong2(k, row));
    simdgroup_load(tb, b, 16, ulong2(column, k));
    simdgroup_multiply_accumulate(acc, ta, tb, acc);
  }
  simdgroup_store(acc, c, 16, ulong2(column, row));
}

// half and bfloat math, computed in float and rounded once.
kernel void narrow_math(device const half* x [[buffer(0)]], device half* out_half [[buffer(1)]],
                        device bfloat* out_bfloat [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  const half h = x[i];
  out_half[i] = metal::exp(h) + metal::sin(h) * 0.5h;
  out_bfloat[i] = metal::sqrt(bfloat(metal::abs(float(h)))) * bfloat(2);
}
"""


@pytest.fixture(scope="module", params=["automatic", "fibers"])
def library(request):
    """The library with its kernels on each execution path: automatic (barrier regions where a
    kernel has that form, msl_barrier_regions.h) and fibers. The path is chosen when a kernel
    is first loaded, which happens inside the tests."""
    if ffi.string(lib.etmetal_device_kind()).decode() != "cpu":
        pytest.skip("these tests run the CPU device")
    saved = os.environ.get("ETMETAL_CPU_EXECUTION")
    if request.param == "automatic":
        os.environ.pop("ETMETAL_CPU_EXECUTION", None)
    else:
        os.environ["ETMETAL_CPU_EXECUTION"] = request.param
    try:
        with compile_library(SOURCE) as compiled:
            yield compiled
    finally:
        if saved is None:
            os.environ.pop("ETMETAL_CPU_EXECUTION", None)
        else:
            os.environ["ETMETAL_CPU_EXECUTION"] = saved


def test_vectors_swizzles_and_narrow_types(library):
    rng = np.random.default_rng(1)
    data = rng.uniform(-4, 4, (300, 4)).astype(np.float32)
    out = np.zeros_like(data)
    packed = np.zeros((300, 3), np.float32)
    bits = np.zeros(300, np.uint32)
    library.function("vectors")(data, out, packed, bits, threads=300, group=64)
    reversed_ = data[:, ::-1].copy()
    reversed_[:, :2] *= 2
    reversed_[:, 2:] = np.where(reversed_[:, 2:] < 0, -1.0, reversed_[:, 2:])
    np.testing.assert_array_equal(out, reversed_)
    np.testing.assert_allclose(packed, np.stack([data[:, 0], data[:, 1], data.sum(axis=1)], axis=1), rtol=1e-6)
    halves = data[:, :2].astype(np.float16).view(np.uint32).reshape(300)
    torch = pytest.importorskip("torch")
    bfloats = torch.from_numpy(data[:, 2].copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits, halves ^ bfloats.astype(np.uint32))


def test_collectives_over_partial_simdgroups(library):
    n = 200  # threadgroups of 64: the last has 8 threads, so its simdgroup has 24 inactive lanes
    rng = np.random.default_rng(2)
    # Magnitudes from 1e-3 to 1e3: a float32 sum depends on its order (Metal's on both paths:
    # lane 0, 1, ..., 31, rounding after each step).
    x = (rng.integers(-8, 9, n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
    sums, scans, shifted = (np.zeros(n, np.float32) for _ in range(3))
    votes = np.zeros(n, np.uint64)
    library.function("collectives")(x, sums, scans, votes, shifted, n, threads=n, group=64)
    for start in range(0, n, 32):
        group = x[start:start + 32]
        lanes = len(group)
        in_order = np.cumsum(group, dtype=np.float32)  # rounds to float32 after each step
        np.testing.assert_array_equal(sums[start:start + lanes], np.full(lanes, in_order[-1]))
        np.testing.assert_array_equal(scans[start:start + lanes], np.concatenate([[0], in_order[:-1]]))
        vote = sum(1 << k for k in range(lanes) if group[k] > 0)
        assert (votes[start:start + lanes] == vote).all()
        padded = np.concatenate([group, np.zeros(32 - lanes, np.float32)])  # inactive: zero
        expected = np.where(np.arange(32) + 4 < 32, np.roll(padded, -4), -100.0)[:lanes]
        np.testing.assert_array_equal(shifted[start:start + lanes], expected)


def test_atomics_shared_by_threadgroups(library):
    n = 64 * 257
    values = np.random.default_rng(3).integers(0, 1 << 20, n).astype(np.uint32)
    bins = np.zeros(16, np.uint32)
    total = np.zeros(1, np.float32)
    maximum = np.zeros(1, np.int32)
    library.function("histogram")(values, bins, total, maximum, threads=n, group=64)
    np.testing.assert_array_equal(bins, np.bincount(values % 16, minlength=16))
    assert total[0] == 0.5 * n
    assert maximum[0] == values.max()


def test_simdgroup_matrix_gemm(library):
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 4, (16, 32)).astype(np.float16)
    b = (rng.integers(-4, 5, (32, 16)) * 0.25).astype(np.float16)
    c = np.zeros((16, 16), np.float32)
    library.function("gemm")(a, b, c, threadgroups=1, group=128)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def test_half_and_bfloat_math(library):
    torch = pytest.importorskip("torch")
    x = np.linspace(-3, 3, 257).astype(np.float16)
    out_half = np.zeros_like(x)
    out_bfloat = torch.zeros(257, dtype=torch.bfloat16)
    library.function("narrow_math")(x, out_half, out_bfloat, threads=257)
    xf = x.astype(np.float64)
    # Each operation rounds to half: exp, sin, the product and the sum.
    exp_h = np.exp(xf).astype(np.float16)
    sin_h = np.sin(xf).astype(np.float16)
    expected_half = (exp_h.astype(np.float64) + (sin_h * np.float16(0.5)).astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(out_half, expected_half)
    # bfloat(|x|) rounds the half value to bfloat first; sqrt then rounds again.
    magnitude = torch.from_numpy(np.abs(x).astype(np.float32)).to(torch.bfloat16).double()
    root = torch.sqrt(magnitude).to(torch.bfloat16)
    np.testing.assert_array_equal(out_bfloat.float().numpy(), (root * 2).float().numpy())


def test_inductor_style_kernel_with_c10_headers(library):
    """c10/metal headers included as they are (not translated): the address-space macros must
    let them compile. The CPU device does not ship them, so torch's include directory is added
    through ETMETAL_CXXFLAGS, in a fresh process because the compiler reads it once."""
    torch = pytest.importorskip("torch")
    root = pathlib.Path(__file__).resolve().parents[2]
    environment = dict(os.environ)
    environment["ETMETAL_CXXFLAGS"] = (environment.get("ETMETAL_CXXFLAGS", "") +
                                       f" -I{pathlib.Path(torch.__file__).parent / 'include'}").strip()
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), environment.get("PYTHONPATH")]))
    script = pathlib.Path(__file__).parent / "programs" / "inductor_style_reduction.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=environment,
                            timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout[-3000:] + result.stderr[-3000:]


def test_threadgroup_atomics(library):
    out = np.zeros(5, np.uint32)
    library.function("tickets")(out, threads=5 * 48 - 10, group=48)  # the last group has 38
    np.testing.assert_array_equal(out, [48, 48, 48, 48, 38])
