"""simd_* / quad_* collectives, barriers, simdgroup matrices and atomics of the emulated Metal
standard library, run by programs/simd_collectives.cpp on a host-thread test executor, against
expectations computed here with numpy from Apple's documented semantics."""

import numpy as np
import pytest

from metal_stdlib_build import PROGRAMS, build_dir, compile_program, run_program, torch_include  # noqa: F401 (fixture)

SIMD_WIDTH = 32


@pytest.fixture(scope="module")
def results(build_dir):
    binary = compile_program(PROGRAMS / "simd_collectives.cpp", build_dir / "simd_collectives",
                             extra_flags=[f"-I{torch_include()}", "-Wno-volatile"])
    tables = {}
    for line in run_program(binary, timeout=120).splitlines():
        name, *values = line.split()
        assert name not in tables or name.startswith("c10."), name
        tables.setdefault(name, []).append(np.array([float(v) for v in values]))
    return tables


def row(results, name):
    rows = results[name]
    assert len(rows) == 1, name
    return rows[0]


def collective_expectations(n):
    """Expected value per lane of every collective in collectives(prefix, n): n threads, so lanes
    n..31 of the simdgroup are inactive and read as zero."""
    lanes = np.arange(n)
    x = lanes + 0.5
    fill = 1000.0 + lanes

    # (np.where evaluates both branches, so out-of-range sources are clipped before indexing.)
    def value_at(source):
        source = np.asarray(source)
        return np.where((source >= 0) & (source < n), x[np.clip(source, 0, n - 1)], 0.0)

    def fill_at(source):
        source = np.asarray(source)
        return np.where((source >= 0) & (source < n), fill[np.clip(source, 0, n - 1)], 0.0)

    def fill_shuffle(delta, modulo, down):
        base, offset = lanes - lanes % modulo, lanes % modulo
        if down:
            inside = offset + delta < modulo
            return np.where(inside, value_at(base + offset + delta), fill_at(base + offset + delta - modulo))
        inside = offset >= delta
        return np.where(inside, value_at(base + offset - delta), fill_at(base + offset - delta + modulo))

    u = (lanes * 7 + 3).astype(np.uint32)
    quad_base, quad_position = lanes - lanes % 4, lanes % 4
    every = np.ones(n)
    expected = {
        "sum": every * x.sum(),
        "product": every * np.prod(1.0 + (lanes % 3) * 0.5),
        "min": every * (lanes - 10).min(),
        "max": every * x.max(),
        "and": every * np.bitwise_and.reduce(u | 0x100),
        "or": every * np.bitwise_or.reduce(u),
        "xor": every * np.bitwise_xor.reduce(u),
        "inclusive_sum": np.cumsum(x),
        "exclusive_sum": np.cumsum(x) - x,
        "inclusive_product": np.cumprod(lanes % 2 + 1),
        "exclusive_product": np.cumprod(lanes % 2 + 1) // (lanes % 2 + 1),
        "shuffle": value_at((lanes * 5 + 3) % SIMD_WIDTH),
        "broadcast9": value_at(np.full(n, 9)),
        "broadcast25": value_at(np.full(n, 25)),
        "shuffle_up3": np.where(lanes < 3, x, value_at(lanes - 3)),
        "shuffle_down3": np.where(lanes + 3 >= SIMD_WIDTH, x, value_at(lanes + 3)),
        "shuffle_down8": np.where(lanes + 8 >= SIMD_WIDTH, x, value_at(lanes + 8)),
        "shuffle_xor6": value_at(lanes ^ 6),
        "rotate_up5": value_at((lanes - 5) % SIMD_WIDTH),
        "rotate_down7": value_at((lanes + 7) % SIMD_WIDTH),
        "fill_down4": fill_shuffle(4, SIMD_WIDTH, down=True),
        "fill_up4": fill_shuffle(4, SIMD_WIDTH, down=False),
        "fill_down3_mod8": fill_shuffle(3, 8, down=True),
        "fill_up3_mod8": fill_shuffle(3, 8, down=False),
        "ballot_mod3": every * sum(2.0 ** l for l in lanes if l % 3 == 0),
        "all_below40": every,
        "all_below19": every * 0,
        "any_is17": every * (n > 17),
        "any_false": every * 0,
        "is_first": (lanes == 0).astype(float),
        "active_mask": every * (2.0 ** n - 1),
        "vote_all_true": every,
        "broadcast_first": every * x[0],
        "float2_sum_y": every * 2 * x.sum(),
        "half_sum": every * x.sum(),
        "quad_sum": np.array([x[quad_base[l]:quad_base[l] + 4].sum() for l in lanes]),
        "quad_shuffle_down1": np.where(quad_position + 1 < 4, value_at(lanes + 1), x),
        "quad_shuffle_xor2": value_at(quad_base + (quad_position ^ 2)),
        "quad_broadcast3": value_at(quad_base + 3),
        "quad_ballot_even": every * 0b0101,
        "quad_exclusive_sum": np.array([x[quad_base[l]:l].sum() for l in lanes]),
        "quad_is_first": (quad_position == 0).astype(float),
        "quad_fill_down1": np.where(quad_position + 1 < 4, value_at(lanes + 1), fill_at(quad_base)),
        "quad_rotate_up1": value_at(quad_base + (quad_position - 1) % 4),
        "float_xor_bits": every * np.bitwise_xor.reduce(u),  # floats combine their bit patterns
        "builtin_sum": every * x.sum(),
        "builtin_fill_down4": fill_shuffle(4, SIMD_WIDTH, down=True),
        "builtin_lane": lanes.astype(float),
    }
    return expected


@pytest.mark.parametrize("prefix, threads", [("full", 32), ("partial", 20)])
def test_collectives(results, prefix, threads):
    expected = collective_expectations(threads)
    produced = {name.split(".", 1)[1] for name in results if name.startswith(prefix + ".")}
    assert produced == set(expected), produced ^ set(expected)
    mismatches = {}
    for name, values in expected.items():
        got = row(results, f"{prefix}.{name}")
        if not np.allclose(got, values, rtol=1e-7, atol=0):
            mismatches[name] = (got.tolist(), values.tolist())
    assert not mismatches, mismatches


def test_inactive_lanes_and_call_sites(results):
    lanes = np.arange(32)
    x = lanes + 0.5
    untouched = -12345.0
    even, odd = (lanes % 2 == 0) & (lanes < 24), (lanes % 2 == 1) & (lanes < 24)
    np.testing.assert_array_equal(row(results, "divergence.even_sum"), np.where(even, x[even].sum(), untouched))
    np.testing.assert_array_equal(row(results, "divergence.odd_sum"), np.where(odd, x[odd].sum(), untouched))
    np.testing.assert_array_equal(row(results, "divergence.odd_is_first"), np.where(odd, lanes == 1, untouched))
    # if/else with a collective in each branch: two collectives, one per call site.
    np.testing.assert_array_equal(row(results, "divergence.split_sum"),
                                  np.where(lanes % 2 == 0, x[lanes % 2 == 0].sum(), 10 * x[lanes % 2 == 1].sum()))
    # `c ? simd_sum(a) : simd_sum(b)` on one line: told apart by the column.
    np.testing.assert_array_equal(row(results, "divergence.same_line_sum"),
                                  np.where(lanes < 12, x[:12].sum(), 100 * x[12:].sum()))
    np.testing.assert_array_equal(row(results, "divergence.after_barrier_sum"), np.full(32, 32.0))
    # Writes before a simdgroup_barrier are visible to the other lanes after it.
    np.testing.assert_array_equal(row(results, "divergence.simdgroup_barrier_neighbour"), np.roll(x, -1))


def test_c10_reductions_with_partial_simdgroups(results):
    counts = [int(r[0]) for r in results["c10.threads"]]
    assert counts == [80, 20]
    for k, threads in enumerate(counts):
        lanes = np.arange(threads)
        values = (1 << 40) + lanes.astype(np.int64) * 1000003
        simdgroup_sums = np.array([values[(l // 32) * 32:(l // 32) * 32 + 32].sum() for l in lanes])
        assert results["c10.simd_long_sum"][k].astype(np.int64).tolist() == simdgroup_sums.tolist()
        assert results["c10.threadgroup_long_sum"][k].astype(np.int64).tolist() == [values.sum()] * threads
        np.testing.assert_array_equal(results["c10.threadgroup_float_sum"][k], np.full(threads, (lanes + 0.5).sum()))


def fragment_position(lane):
    """Apple's documented simdgroup_matrix thread_elements() layout for 8x8 matrices."""
    quad = lane // 4
    return (quad & 4) + (lane // 2) % 4, (quad & 2) * 2 + (lane % 2) * 2


def test_simdgroup_matrix(results):
    index = np.arange(100)
    a_source = ((np.arange(80) * 7) % 11 - 5).astype(np.float64)
    b_source = ((index * 5) % 13) * 0.25 - 1.0
    c = np.arange(64).reshape(8, 8) * 0.5
    a = a_source.reshape(8, 10)[:, 1:9]                  # origin (column 1, row 0), stride 10
    b = b_source.reshape(10, 10)[1:9, 2:10].T            # origin (2, 1), stride 10, transposed
    np.testing.assert_array_equal(row(results, "matrix.d").reshape(8, 8), a @ b + c)
    e_out = np.zeros((8, 9))
    e_out[:, 1:9] = (a @ b).T                            # stored transposed at origin (1, 0), stride 9
    np.testing.assert_array_equal(row(results, "matrix.e_transposed").reshape(8, 9), e_out)
    positions = [fragment_position(lane) for lane in range(32)]
    assert len({(r, col + k) for r, col in positions for k in (0, 1)}) == 64
    np.testing.assert_array_equal(row(results, "matrix.a_elements_x"), [a[r, col] for r, col in positions])
    np.testing.assert_array_equal(row(results, "matrix.a_elements_y"), [a[r, col + 1] for r, col in positions])
    np.testing.assert_array_equal(row(results, "matrix.identity2").reshape(8, 8), 2 * np.eye(8))
    np.testing.assert_array_equal(row(results, "matrix.filled3"), np.full(64, 3.0))
    a_half = (np.arange(64) % 9 - 4.0).reshape(8, 8)
    b_half = ((np.arange(64) % 5) * 0.5).reshape(8, 8)
    np.testing.assert_array_equal(row(results, "matrix.mixed").reshape(8, 8), a_half @ b_half + c)
    np.testing.assert_array_equal(row(results, "matrix.operator_product").reshape(8, 8), (a @ b) @ c)


def test_atomics_are_atomic_across_host_threads(results):
    threads, iterations = 8, 20000
    total = threads * iterations
    assert row(results, "atomic.counter")[0] == total
    assert row(results, "atomic.float_sum")[0] == total
    assert row(results, "atomic.max")[0] == (threads - 1) * 100000 + iterations - 1
    assert row(results, "atomic.min")[0] == -((threads - 1) * 100000 + iterations - 1)
    assert row(results, "atomic.or")[0] == 0xffffffff
    assert row(results, "atomic.cas")[0] == 2 * total
    assert row(results, "atomic.long")[0] == total * 2.0 ** 33
    # c10's half atomic_add: a 32-bit compare-and-swap on the word holding each half.
    np.testing.assert_array_equal(row(results, "atomic.c10_half_add"), [1000.0] * 4)
    np.testing.assert_array_equal(row(results, "atomic.exchange"), [total, 7])
    np.testing.assert_array_equal(row(results, "atomic.failed_cas"), [0, 7, 7])
