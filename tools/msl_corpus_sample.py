"""Runs a sample of MLX's kernels on the CPU device against references written here (numpy).

    python3 tools/msl_corpus_sample.py MLX_CHECKOUT [--only NAME ...]

Compiles MLX's unary.metal and binary.metal (quoted includes inlined, as tools/msl_corpus.py
does), runs each sampled kernel instantiation on fixed inputs and compares with numpy:
elementwise float32 math (tolerance 2e-6 relative + 1e-6 absolute, NaN where both are NaN;
1e-5 for MLX's expm1f, see RELATIVE_TOLERANCE)
and exact int32 arithmetic, bitwise and comparison kernels. Prints one line per kernel and a
count of matches. Nothing of the corpus is kept.
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from msl_corpus import inline  # noqa: E402

N = 1000
RNG = np.random.default_rng(7)
X = RNG.uniform(-3, 3, N).astype(np.float32)
POSITIVE = RNG.uniform(0.05, 4, N).astype(np.float32)
UNIT = RNG.uniform(-0.99, 0.99, N).astype(np.float32)
ABOVE_ONE = RNG.uniform(1.01, 5, N).astype(np.float32)
Y = RNG.uniform(-3, 3, N).astype(np.float32)
Y[Y == 0] = 1
A = RNG.integers(-1000, 1000, N).astype(np.int32)
B = RNG.integers(-50, 50, N).astype(np.int32)
B[B == 0] = 7
SHIFT = RNG.integers(0, 31, N).astype(np.int32)
erf = np.vectorize(math.erf, otypes=[np.float64])

# name: (input, reference) for v_<Op>float32float32
UNARY_FLOAT = {
    "Abs": (X, np.abs), "ArcCos": (UNIT, np.arccos), "ArcCosh": (ABOVE_ONE, np.arccosh),
    "ArcSin": (UNIT, np.arcsin), "ArcSinh": (X, np.arcsinh), "ArcTan": (X, np.arctan),
    "ArcTanh": (UNIT, np.arctanh), "Ceil": (X, np.ceil), "Cos": (X, np.cos), "Cosh": (X, np.cosh),
    "Exp": (X, np.exp), "Expm1": (X, np.expm1), "Floor": (X, np.floor), "Log": (POSITIVE, np.log),
    "Log2": (POSITIVE, np.log2), "Log10": (POSITIVE, np.log10), "Log1p": (POSITIVE, np.log1p),
    "Negative": (X, np.negative), "Sigmoid": (X, lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))),
    "Erf": (X, erf), "Sign": (X, np.sign), "Sin": (X, np.sin), "Sinh": (X, np.sinh),
    "Square": (X, np.square), "Sqrt": (POSITIVE, np.sqrt), "Rsqrt": (POSITIVE, lambda x: 1 / np.sqrt(x.astype(np.float64))),
    "Tan": (UNIT, np.tan), "Tanh": (X, np.tanh), "Round": (X * 2, np.rint),
}
UNARY_INT = {"Abs": np.abs, "Negative": np.negative, "Sign": np.sign, "Square": np.square,
             "BitwiseInvert": np.invert, "Floor": lambda a: a, "Ceil": lambda a: a}


def truncating_divide(a, b):
    return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(np.int32)


# name: (a, b, reference, output dtype) for vv_<Op><type>
BINARY_FLOAT = {
    "Add": (X, Y, np.add), "Subtract": (X, Y, np.subtract), "Multiply": (X, Y, np.multiply),
    "Divide": (X, Y, np.divide), "Maximum": (X, Y, np.maximum), "Minimum": (X, Y, np.minimum),
    "Power": (POSITIVE, Y, lambda a, b: np.power(a.astype(np.float64), b)), "Remainder": (X, Y, np.mod),
    "ArcTan2": (X, Y, np.arctan2), "LogAddExp": (X, Y, np.logaddexp),
    "Equal": (X, np.where(RNG.random(N) < 0.3, X, Y), np.equal), "Greater": (X, Y, np.greater),
    "Less": (X, Y, np.less), "GreaterEqual": (X, Y, np.greater_equal), "LessEqual": (X, Y, np.less_equal),
    "NotEqual": (X, np.where(RNG.random(N) < 0.3, X, Y), np.not_equal),
}
BINARY_INT = {
    "Add": (A, B, np.add), "Subtract": (A, B, np.subtract), "Multiply": (A, B, np.multiply),
    "Divide": (A, B, truncating_divide), "Remainder": (A, B, np.mod), "Maximum": (A, B, np.maximum),
    "Minimum": (A, B, np.minimum), "BitwiseAnd": (A, B, np.bitwise_and), "BitwiseOr": (A, B, np.bitwise_or),
    "BitwiseXor": (A, B, np.bitwise_xor), "LeftShift": (A, SHIFT, np.left_shift),
    "RightShift": (A, SHIFT, np.right_shift), "Greater": (A, B, np.greater), "Equal": (A, A * (B % 2), np.equal),
}
BOOLEAN = {"Equal", "Greater", "Less", "GreaterEqual", "LessEqual", "NotEqual"}
# MLX's own expm1f (expm1f.h, a polynomial) is 6e-6 off expm1 near x = 2.43, in IEEE float
# arithmetic evaluated by plain C++ as well: a property of the kernel, not of the CPU device.
RELATIVE_TOLERANCE = {"v_Expm1float32float32": 1e-5}


def matches(got, expected, rtol=2e-6):
    expected = np.asarray(expected)
    if got.dtype.kind in "iub":
        return np.array_equal(got, expected.astype(got.dtype))
    both_nan = np.isnan(got) & np.isnan(expected)
    close = np.isclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=1e-6)
    return bool(np.all(close | both_nan))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--only", nargs="*", default=[], help="kernel names to run, not all")
    args = parser.parse_args()
    from etmetal_py.kernels import compile_library
    kernels_dir = args.checkout.resolve() / "mlx/backend/metal/kernels"

    def source(name):
        path = kernels_dir / name
        return inline(path, args.checkout.resolve(), {path.resolve()})

    cases = []  # (file, kernel, inputs, reference, output dtype)
    for op, (x, ref) in UNARY_FLOAT.items():
        cases.append(("unary.metal", f"v_{op}float32float32", [x], lambda x, r=ref: r(x), np.float32))
    for op, ref in UNARY_INT.items():
        cases.append(("unary.metal", f"v_{op}int32int32", [A], lambda a, r=ref: r(a), np.int32))
    for op, (a, b, ref) in BINARY_FLOAT.items():
        cases.append(("binary.metal", f"vv_{op}float32", [a, b], ref, np.bool_ if op in BOOLEAN else np.float32))
    for op, (a, b, ref) in BINARY_INT.items():
        cases.append(("binary.metal", f"vv_{op}int32", [a, b], ref, np.bool_ if op in BOOLEAN else np.int32))
    if args.only:
        cases = [c for c in cases if c[1] in args.only]
    libraries = {}
    matched = 0
    for file, kernel, inputs, reference, dtype in cases:
        if file not in libraries:
            libraries[file] = compile_library(source(file))
        out = np.zeros(N, dtype=dtype)
        try:
            libraries[file].function(kernel)(*inputs, out, np.array([N], np.uint32), threads=N)
        except Exception as error:  # noqa: BLE001 - reported per kernel
            print(f"error     {kernel}: {str(error).splitlines()[0][:300]}")
            continue
        ok = matches(out, reference(*inputs), RELATIVE_TOLERANCE.get(kernel, 2e-6))
        matched += ok
        print(f"{'match' if ok else 'MISMATCH':9} {kernel}")
    print(f"\n{matched} of {len(cases)} sampled kernels match their references")
    return 0 if matched == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
