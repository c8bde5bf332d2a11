"""exp, exp2 and exp10 of float (etm_math.h's branch-free exp2_to_float): error against long
double references over a sweep of float bit patterns, which covers every binade, the overflow
and underflow thresholds, subnormal results and the special values (inf, -inf, NaN, 0)."""

import subprocess

import pytest

from metal_stdlib_build import PROGRAMS, build_dir, compile_program  # noqa: F401 (fixture)

# Largest error allowed in ulps: correctly rounded but for the polynomial's 2e-10 relative
# (Metal's precise exp allows 4 ulps).
MAX_ULPS = 0.51


def sweep(build_dir, stride):
    """{name: (largest error in ulps, its argument, special-value mismatches)} over every
    `stride`-th float bit pattern."""
    binary = compile_program(PROGRAMS / "exp_sweep.cpp", build_dir / "exp_sweep", optimize="-O2")
    result = subprocess.run([str(binary), str(stride)], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    results = {}
    for line in result.stdout.splitlines():
        name, worst, worst_at, special_mismatches = line.split()
        results[name] = (float(worst), worst_at, int(special_mismatches))
    assert set(results) == {"exp", "exp2", "exp10"}, result.stdout
    return results


def check(results):
    failures = [f"{name}: {worst:.4f} ulp at {at}, {mismatches} special-value mismatches"
                for name, (worst, at, mismatches) in results.items()
                if worst > MAX_ULPS or mismatches]
    assert not failures, failures


def test_exp_functions_over_a_sweep_of_floats(build_dir):
    # A prime stride: about a million arguments per function, every binade, odd and even
    # mantissas.
    check(sweep(build_dir, 4099))


@pytest.mark.slow
def test_exp_functions_over_a_dense_sweep_of_floats(build_dir):
    check(sweep(build_dir, 61))
