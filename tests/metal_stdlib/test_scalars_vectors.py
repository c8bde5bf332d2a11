"""Scalars, vectors, conversions and math of the emulated Metal standard library, against
hand-computed values (programs/vector_semantics.cpp) and numpy / torch (programs/scalar_eval.cpp)."""

import os
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest

from metal_stdlib_build import (METAL_INCLUDE, PROGRAMS, build_dir,  # noqa: F401 (fixture)
                                compile_program, run_program)


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_vector_and_scalar_semantics(std, build_dir):
    binary = compile_program(PROGRAMS / "vector_semantics.cpp", build_dir / f"vector_semantics_{std}", std=std)
    output, errors = run_program(binary, with_stderr=True)
    assert output.strip().endswith("0 failures"), output
    assert errors == "[com.etmetal.test:stdlib] info value 7 of 2.5 (x)\n", errors


def clang_command():
    """A clang++ >= 15 (clang 14 rejects _Float16 on x86-64): $METAL_STDLIB_TEST_CLANG (a
    command line, e.g. `python -m ziglang c++`) or clang++ on PATH."""
    configured = os.environ.get("METAL_STDLIB_TEST_CLANG")
    command = shlex.split(configured) if configured else ([shutil.which("clang++")] if shutil.which("clang++") else None)
    if not command:
        pytest.skip("no clang++ (set METAL_STDLIB_TEST_CLANG to test the headers with clang)")
    version = subprocess.run(command + ["--version"], capture_output=True, text=True).stdout
    match = re.search(r"clang version (\d+)", version)
    if not match or int(match.group(1)) < 15:
        pytest.skip(f"clang >= 15 needed, found: {version.splitlines()[:1]}")
    return command


def test_vector_and_scalar_semantics_with_clang(tmp_path):
    """The same checks compiled by clang, without -fsingle-precision-constant (clang has none),
    minus the bfloat literal, which clang's lexer cannot hand to a literal operator."""
    source = (PROGRAMS / "vector_semantics.cpp").read_text().replace(" && float(2.5bf) == 2.5f", "")
    assert "2.5bf" not in source
    (tmp_path / "vector_semantics.cpp").write_text(source)
    binary = tmp_path / "vector_semantics_clang"
    result = subprocess.run(clang_command() + ["-std=c++20", "-O1", "-Wall", f"-I{METAL_INCLUDE}",
                                               str(tmp_path / "vector_semantics.cpp"), "-o", str(binary)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-6000:]
    assert run_program(binary).strip().endswith("0 failures")


@pytest.fixture(scope="module")
def evaluate(build_dir):
    binary = compile_program(PROGRAMS / "scalar_eval.cpp", build_dir / "scalar_eval")

    def run(requests):
        """requests: [(operation, uint32 array of shape (count, arity) or (count,))] ->
        {operation: uint32 results}"""
        text = []
        assert len({operation for operation, _ in requests}) == len(requests), "one request per operation"
        for operation, arguments in requests:
            words = np.asarray(arguments, dtype=np.uint32).reshape(len(arguments), -1)
            text.append(f"{operation} {len(words)}")
            text.append(" ".join(f"{w:x}" for w in words.ravel()))
        results = {}
        for line in run_program(binary, "\n".join(text) + "\n").splitlines():
            operation, *values = line.split()
            results[operation] = np.array([int(v, 16) for v in values], dtype=np.uint64).astype(np.uint32)
        return results

    return run


def bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def rounding_cases(target):
    """float32 values around the rounding boundaries of `target` (float16 or bfloat16 spacing):
    exact values, exact ties, one float ulp either side of the ties, subnormals, overflow."""
    rng = np.random.default_rng(7)
    if target == "half":
        mantissa_bits, smallest_subnormal, largest = 10, 2.0 ** -24, 65504.0
        with np.errstate(over="ignore"):
            representable = rng.uniform(-70000, 70000, 300).astype(np.float16).astype(np.float64)
        representable = representable[np.isfinite(representable)]
    else:
        mantissa_bits, smallest_subnormal, largest = 7, 2.0 ** -133, float(np.float32(3.3895314e38))
        representable = np.ldexp(rng.integers(128, 256, 300), rng.integers(-140, 120, 300) - 7)
    exponents = rng.integers(-30 if target == "half" else -140, 15 if target == "half" else 127, 400)
    mantissas = rng.integers(0, 2 ** mantissa_bits, 400)
    ties = np.ldexp((2 ** mantissa_bits + mantissas) * 2.0 + 1.0, exponents - mantissa_bits - 1)
    ties = ties[np.abs(ties) < largest * 1.01]
    ties32 = ties.astype(np.float32)
    above = np.nextafter(ties32, np.float32(np.inf))
    below = np.nextafter(ties32, np.float32(-np.inf))
    subnormals = np.array([smallest_subnormal * k for k in (0.25, 0.5, 0.75, 1, 1.5, 2.5, 3, 1023.5)])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, largest, -largest, largest * 1.001,
                         65519.99, 65520.0, 1e-8, -1e-8, 3.4e38])
    random_bits = rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32)
    values = np.concatenate([representable, ties32, above, below, subnormals, -subnormals, specials,
                             -representable]).astype(np.float32)
    values = np.concatenate([values, random_bits.view(np.float32)])
    return values[~np.isnan(values)]


def test_half_conversions_match_numpy(evaluate):
    values = rounding_cases("half")
    every_half = np.arange(65536, dtype=np.uint32)
    results = evaluate([("half_from_float", bits(values)), ("float_from_half", every_half)])
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(results["half_from_float"], expected)
    widened = results["float_from_half"].view(np.float32)
    reference = every_half.astype(np.uint16).view(np.float16).astype(np.float32)
    nan = np.isnan(reference)
    assert np.array_equal(np.isnan(widened), nan)
    np.testing.assert_array_equal(widened[~nan].view(np.uint32), reference[~nan].view(np.uint32))


def test_half_nan_stays_nan(evaluate):
    nan_bits = bits([np.nan, -np.nan, np.float32(np.nan)]).copy()
    nan_bits[2] = 0x7f800001  # signalling NaN with only the lowest payload bit
    results = evaluate([("half_from_float", nan_bits)])["half_from_float"]
    halves = results.astype(np.uint16).view(np.float16)
    assert np.isnan(halves).all()


def test_bfloat_conversions_match_torch(evaluate):
    torch = pytest.importorskip("torch")
    values = rounding_cases("bfloat")
    results = evaluate([("bfloat_from_float", bits(values)),
                        ("float_from_bfloat", np.arange(65536, dtype=np.uint32))])
    expected = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(results["bfloat_from_float"], expected)
    widened = results["float_from_bfloat"].view(np.float32)
    reference = torch.from_numpy(np.arange(65536, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    reference = reference.to(torch.float32).numpy()
    nan = np.isnan(reference)
    assert np.array_equal(np.isnan(widened), nan)
    np.testing.assert_array_equal(widened[~nan], reference[~nan])


def test_bfloat_nan_stays_quiet_nan(evaluate):
    nan_inputs = np.array([0x7fc00000, 0xffc00000, 0x7f800001, 0x7fffffff], dtype=np.uint32)
    results = evaluate([("bfloat_from_float", nan_inputs)])["bfloat_from_float"]
    widened = (results.astype(np.uint32) << 16).view(np.float32)
    assert np.isnan(widened).all()
    assert ((results >> 15) == (nan_inputs >> 31)).all()  # sign kept


def test_integer_to_half_and_float_to_integer(evaluate):
    integers = np.array([0, 1, -1, 2049, 2051, 65504, 65519, 65520, 100000, -70000], dtype=np.int32)
    floats = np.array([0.0, 1.9, -1.9, 2.5, -2.5, 1e9, -1e9, 16777217.0], dtype=np.float32)
    results = evaluate([("half_from_int", integers.view(np.uint32)), ("int_from_float", bits(floats))])
    with np.errstate(over="ignore"):
        expected = integers.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(results["half_from_int"], expected)
    np.testing.assert_array_equal(results["int_from_float"].view(np.int32), floats.astype(np.int32))


def round_to(values, dtype):
    """float64 values rounded to float32, float16 or bfloat16 (infinite where they overflow),
    returned as float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype == "bfloat16":
            import torch
            return torch.from_numpy(values.astype(np.float64)).to(torch.bfloat16).double().numpy()
        return values.astype(dtype).astype(np.float64)


def ulp_of(rounded, dtype):
    """The spacing of `dtype` at each (finite, already rounded) value."""
    mantissa_bits, smallest = {"float32": (24, 2.0 ** -149), "float16": (11, 2.0 ** -24),
                               "bfloat16": (8, 2.0 ** -133)}[dtype]
    exponent = np.frexp(np.abs(rounded))[1]
    return np.maximum(np.ldexp(1.0, exponent - mantissa_bits), smallest)


def worst_ulp_error(got, reference, dtype):
    """Checks NaN and infinity agreement exactly, returns the largest distance of the finite
    results from the exact reference, in ulps of `dtype`."""
    rounded = round_to(reference, dtype)
    assert np.array_equal(np.isnan(got), np.isnan(reference))
    infinite = np.isinf(rounded)
    assert np.array_equal(got[infinite], rounded[infinite])
    finite = np.isfinite(rounded)
    if not finite.any():
        return 0.0
    error = np.abs(got[finite].astype(np.float64) - reference[finite]) / ulp_of(rounded[finite], dtype)
    assert np.isfinite(error).all()
    return float(error.max())


# sin, cos, tan of pi*x: exact zeros where the mathematical value is zero (float64's
# sin(pi * 1.0) is 1.2e-16, not 0).
def sinpi(x):
    reduced = np.fmod(x, 2.0)
    return np.where(reduced == np.round(reduced), np.copysign(0.0, x), np.sin(np.pi * reduced))


def cospi(x):
    reduced = np.fmod(np.abs(x), 2.0)
    return np.where((reduced == 0.5) | (reduced == 1.5), 0.0, np.cos(np.pi * reduced))


def tanpi(x):
    reduced = np.fmod(x, 1.0)
    return np.where(reduced == 0.0, np.copysign(0.0, x), np.tan(np.pi * reduced))


def c_round(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def fract(x):
    return np.minimum(x - np.floor(x), float(np.float32(1) - np.float32(2.0 ** -24)))


# name: (reference in float64, input domain, allowed float32 ulps). Exact functions must be
# exact (0) or correctly rounded (0.5); transcendental ones within 2 ulps (Metal's precise math
# allows 4), sinpi/cospi/tanpi within 1.
UNARY = {
    "exp": (np.exp, (-80, 80), 2), "exp2": (np.exp2, (-120, 120), 2),
    "exp10": (lambda x: 10.0 ** x, (-35, 35), 2), "log": (np.log, (1e-30, 1e30), 2),
    "log2": (np.log2, (1e-30, 1e30), 2), "log10": (np.log10, (1e-30, 1e30), 2),
    "sqrt": (np.sqrt, (0, 1e30), 0.5), "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-30, 1e30), 2),
    "sin": (np.sin, (-100, 100), 2), "cos": (np.cos, (-100, 100), 2), "tan": (np.tan, (-1.5, 1.5), 2),
    "asin": (np.arcsin, (-1, 1), 2), "acos": (np.arccos, (-1, 1), 2), "atan": (np.arctan, (-100, 100), 2),
    "sinh": (np.sinh, (-80, 80), 2), "cosh": (np.cosh, (-80, 80), 2), "tanh": (np.tanh, (-20, 20), 2),
    "asinh": (np.arcsinh, (-1e6, 1e6), 2), "acosh": (np.arccosh, (1, 1e6), 2),
    "atanh": (np.arctanh, (-0.999, 0.999), 2),
    "sinpi": (sinpi, (-1000, 1000), 1), "cospi": (cospi, (-1000, 1000), 1), "tanpi": (tanpi, (-0.49, 0.49), 1),
    "floor": (np.floor, (-1e6, 1e6), 0), "ceil": (np.ceil, (-1e6, 1e6), 0), "trunc": (np.trunc, (-1e6, 1e6), 0),
    "round": (c_round, (-1e4, 1e4), 0), "rint": (np.rint, (-1e4, 1e4), 0), "fract": (fract, (-1e3, 1e3), 0),
    "fabs": (np.abs, (-1e6, 1e6), 0),
}
BINARY = {
    "pow": (np.power, (0.01, 10), (-20, 20), 2), "powr": (np.power, (0.01, 10), (-20, 20), 2),
    "atan2": (np.arctan2, (-10, 10), (-10, 10), 2), "fmod": (np.fmod, (-1e4, 1e4), (0.5, 100), 0),
    "fmin": (np.fmin, (-10, 10), (-10, 10), 0), "fmax": (np.fmax, (-10, 10), (-10, 10), 0),
    "copysign": (np.copysign, (-10, 10), (-10, 10), 0), "fdim": (lambda x, y: np.maximum(x - y, 0), (-10, 10), (-10, 10), 0.5),
}


def domain_values(rng, low, high, count, dtype):
    """`count` values in [low, high] (log-uniform over wide positive ranges), the first ones
    simple exact values, rounded to `dtype`."""
    values = rng.uniform(low, high, count)
    if low > 0 and high / low > 1e3:
        values = np.exp(rng.uniform(np.log(low), np.log(high), count))
    exact = [v for v in (0.0, 0.5, 1.0, -1.0, 2.0, 0.25, -0.5, 1.5, 3.0) if low <= v <= high]
    values[:len(exact)] = exact
    if dtype == "float16":
        values = np.clip(values, -60000.0, 60000.0)
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16).to(torch.float32).numpy()
    return values.astype(dtype).astype(np.float32)  # clipped to half's range above


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_math_functions_match_numpy(dtype, evaluate):
    if dtype == "bfloat16":
        pytest.importorskip("torch")
    prefix = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    rng = np.random.default_rng(11)
    requests, references = [], {}
    for name, (reference, (low, high), _) in UNARY.items():
        x = domain_values(rng, low, high, 300, dtype)
        requests.append((f"{prefix}.{name}", bits(x)))
        with np.errstate(all="ignore"):
            references[name] = reference(x.astype(np.float64))
    for name, (reference, (low_x, high_x), (low_y, high_y), _) in BINARY.items():
        x = domain_values(rng, low_x, high_x, 300, dtype)
        y = domain_values(rng, low_y, high_y, 300, dtype)[::-1]
        requests.append((f"{prefix}.{name}", np.stack([bits(x), bits(y)], axis=1)))
        with np.errstate(all="ignore"):
            references[name] = reference(x.astype(np.float64), y.astype(np.float64))
    results = evaluate(requests)
    tolerances = {name: spec[-1] for name, spec in {**UNARY, **BINARY}.items()}
    failures = []
    for name, reference in references.items():
        got = results[f"{prefix}.{name}"].view(np.float32)
        worst = worst_ulp_error(got, reference, dtype)
        # half and bfloat are computed in float and rounded once: within one ulp of the narrow
        # type, half an ulp for correctly rounded functions.
        allowed = tolerances[name] if dtype == "float32" else (1.0 if tolerances[name] > 0.5 else 0.5)
        if worst > allowed + 1e-9:
            failures.append(f"{name}: {worst:.2f} ulp > {allowed}")
    assert not failures, failures


def test_fma_is_fused(evaluate):
    x = np.float32(1 + 2 ** -12)
    requests = [("f32.fma", np.array([[bits(x), bits(x), bits(-(1 + 2 ** -11))]], dtype=np.uint32).reshape(1, 3))]
    got = evaluate(requests)["f32.fma"].view(np.float32)[0]
    assert got == np.float32(2.0 ** -24)  # x*x - (1 + 2^-11) exactly, lost without fusion


def test_swizzle_list_is_current():
    """etm_swizzle_list.h is generated; it must be what the generator writes now."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("generate_swizzle_list",
                                                  PROGRAMS.parent / "generate_swizzle_list.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert (METAL_INCLUDE / "etm_swizzle_list.h").read_text() == generator.render()
    assert "S(xyzw, 4, 228)" in generator.render() and "S(xxxx, 4, 0)" not in generator.render()
