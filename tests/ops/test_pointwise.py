"""The pointwise fallbacks (abs, add, mul, pow in their Tensor / Scalar variants, gcd, angle)
against torch eager on the CPU: every supported dtype, mixed-dtype promotion (0-dim tensors and
scalars raising only the category), broadcasting, strided operands, integer wrapping, NaN, empty
tensors, and the errors torch gives."""


import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32]
ALL = [torch.bool] + INTEGERS + FLOATS


def sample(shape, dtype, seed, low=-50, high=50):
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 10).to(dtype)
    low = 0 if dtype == torch.uint8 else low
    return torch.randint(low, high, shape, generator=generator).to(dtype)


def call(name, *args):
    """Tensors become device tensors, floats stay scalars; returns (code, result or None)."""
    devices = [as_device(a) if isinstance(a, torch.Tensor) else None for a in args]
    values = [d.handle if d is not None else a for d, a in zip(devices, args)]
    r0 = ffi.new("AtenTensorHandle*")
    code = getattr(lib, f"aoti_torch_mps_{name}")(*values, r0)
    return code, (Tensor(r0[0]).torch() if code == 0 else None)


def check(name, expected, *args, tolerance=0.0):
    code, got = call(name, *args)
    assert code == 0, etmetal_py.last_error()
    assert got.dtype == expected.dtype and got.shape == expected.shape, (name, got.dtype, expected.dtype)
    if expected.dtype.is_floating_point:
        # reference in float32 rounded to the result dtype (torch's opmath); half types round once
        limit = tolerance if expected.dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.float(), expected.float(), rtol=limit, atol=limit, equal_nan=True)
    else:
        assert torch.equal(got, expected), (name, got, expected)


@pytest.mark.parametrize("a_dtype", ALL, ids=str)
def test_binary_ops_promote_like_torch(a_dtype):
    for b_dtype in ALL:
        a, b = sample((3, 4), a_dtype, 1), sample((4,), b_dtype, 2)
        check("add_Tensor", torch.add(a, b), a, b, 1.0, tolerance=1e-6)
        check("mul_Tensor", torch.mul(a, b), a, b, tolerance=1e-6)
        if torch.promote_types(a_dtype, b_dtype) in INTEGERS:
            check("add_Tensor", torch.add(a, b, alpha=-3), a, b, -3.0)
            check("gcd", torch.gcd(a, b), a, b)
        if a_dtype in INTEGERS + FLOATS and b_dtype in INTEGERS + FLOATS:
            base = a.abs() if a_dtype.is_floating_point else a
            exponent = (b.abs() % 4 if not b_dtype.is_floating_point else b / 10)
            check("pow_Tensor_Tensor", torch.pow(base, exponent), base, exponent, tolerance=1e-5)


def test_zero_dim_tensors_and_scalars_raise_only_the_category():
    half, byte = sample((5,), torch.float16, 3), sample((5,), torch.uint8, 4)
    for a, b in ((half, torch.tensor(2.5)), (byte, torch.tensor(300, dtype=torch.int64)), (byte, torch.tensor(1.5)),
                 (torch.tensor(True), byte), (torch.tensor(7), torch.tensor(2.0, dtype=torch.bfloat16))):
        check("add_Tensor", torch.add(a, b), a, b, 1.0, tolerance=1e-6)
        check("mul_Tensor", torch.mul(a, b), a, b, tolerance=1e-6)
    for x in (half, byte, sample((5,), torch.int32, 5), sample((5,), torch.bool, 6)):
        for scalar in (2.5, -3.0, 0.5):
            # etmetal reads an integral double as an integer scalar: torch's equivalent passes an int
            torch_scalar = int(scalar) if scalar.is_integer() else scalar
            check("add_Scalar", torch.add(x, torch_scalar), x, scalar, 1.0, tolerance=1e-6)
            check("mul_Scalar", torch.mul(x, torch_scalar), x, scalar, tolerance=1e-6)


@pytest.mark.parametrize("dtype", INTEGERS + FLOATS, ids=str)
def test_unary_ops_and_scalar_powers(dtype):
    x = sample((4, 6), dtype, 7)
    if dtype.is_floating_point:
        x[0, 0] = float("nan")
    for view in (x, x.t(), x[:, ::2], x[1, 2]):
        check("abs", torch.abs(view), view)
        check("angle", torch.angle(view), view, tolerance=1e-6)
        base = view.abs() + (1 if dtype == torch.int64 else 0)
        check("pow_Tensor_Scalar", torch.pow(base, 3), base, 3.0, tolerance=1e-5)
        if dtype.is_floating_point:
            check("pow_Tensor_Scalar", torch.pow(view, 0.5), view, 0.5, tolerance=1e-6)
            check("pow_Tensor_Scalar", torch.pow(view, -2), view, -2.0, tolerance=1e-5)  # negative bases too
        exponent = view.abs() % 5 if not dtype.is_floating_point else view / 20
        check("pow_Scalar", torch.pow(2, exponent), 2.0, exponent, tolerance=1e-5)
        check("pow_Scalar", torch.pow(1.5, exponent), 1.5, exponent, tolerance=1e-5)


def test_integer_edge_cases():
    big = torch.tensor([2 ** 62, -(2 ** 63), 7, -9], dtype=torch.int64)
    check("add_Tensor", torch.add(big, big), big, big, 1.0)  # wraps
    check("mul_Tensor", torch.mul(big, big), big, big)
    check("abs", torch.abs(big), big)
    smallest = torch.tensor([-128, 5], dtype=torch.int8)
    check("abs", torch.abs(smallest), smallest)
    bases = torch.tensor([2, -1, 1, -1, 0, 3, -2])
    exponents = torch.tensor([-1, -3, -2, -4, 0, 40, 63])
    check("pow_Tensor_Tensor", torch.pow(bases, exponents), bases, exponents)
    check("gcd", torch.gcd(bases, exponents), bases, exponents)
    flags = torch.tensor([True, False, True])
    check("add_Tensor", torch.add(flags, flags, alpha=-1), flags, flags, -1.0)


def test_empty_and_bad_input():
    empty = torch.zeros(0, 3)
    check("add_Tensor", torch.add(empty, torch.ones(3)), empty, torch.ones(3), 1.0)
    x, ints = torch.randn(3), torch.arange(3)
    poisoning_failure(call("add_Tensor", ints, ints, 1.5)[0], "aoti_torch_mps_add_Tensor",
                      "argument alpha must not be a floating point number")
    poisoning_failure(call("pow_Tensor_Scalar", ints, -2.0)[0], "Integers to negative integer powers are not allowed")
    poisoning_failure(call("pow_Tensor_Tensor", x > 0, x > 0)[0], "\"pow\" not implemented for 'Bool'")
    poisoning_failure(call("abs", x > 0)[0], "\"abs\" not implemented for 'Bool'")
    poisoning_failure(call("gcd", x, x)[0], "\"gcd\" not implemented for 'float32'")
    poisoning_failure(call("mul_Tensor", torch.randn(2, 3), torch.randn(4))[0], "must match the size of tensor b")
    poisoning_failure(call("mul_Tensor", x.double(), x)[0], "dtype float64 is not supported")


def test_complex64_operands():
    generator = torch.Generator().manual_seed(7)
    z = torch.randn(4, 5, dtype=torch.complex64, generator=generator) * 10
    w = torch.randn(5, dtype=torch.complex64, generator=generator)
    real = torch.randn(4, 5, generator=generator)
    extremes = torch.tensor([0, 1e30 + 1e30j, -3e-30j, complex("inf"), complex("nan"), -2 + 0j,
                             complex(float("inf"), float("nan"))], dtype=torch.complex64)
    for name, expected, args in (
            ("mul_Tensor", z * w, (z, w)), ("mul_Tensor", z.t() * real.t(), (z.t(), real.t())),
            ("mul_Tensor", real * torch.tensor(2 - 1j), (real, torch.tensor(2 - 1j))),
            ("mul_Scalar", z * 2.5, (z, 2.5)), ("add_Tensor", z + 0.5 * w, (z, w, 0.5)),
            ("add_Tensor", torch.arange(5) + w, (torch.arange(5), w, 1.0)), ("add_Scalar", z + 3, (z, 3.0, 1.0)),
            ("abs", z[:, ::2].abs(), (z[:, ::2],)), ("abs", extremes.abs(), (extremes,)),
            ("angle", z.angle(), (z,)), ("angle", extremes.angle(), (extremes,))):
        code, got = call(name, *args)
        assert code == 0, etmetal_py.last_error()
        assert got.dtype == expected.dtype and got.shape == expected.shape, (name, got.dtype)
        compare = (lambda t: torch.view_as_real(t)) if expected.is_complex() else (lambda t: t)
        torch.testing.assert_close(compare(got), compare(expected), rtol=2e-6, atol=1e-6, equal_nan=True)
    poisoning_failure(call("pow_Tensor_Scalar", z, 2.0)[0], "complex powers are not implemented")
    poisoning_failure(call("mul_Tensor", z, z.to(torch.complex128))[0], "dtype complex128 is not supported")


def test_results_are_laid_out_as_torch_lays_them_out():
    # Compiled models index a fallback's result with the strides torch's meta function gave it
    # (eager CPU kernels differ in places: angle of a complex tensor comes back contiguous).
    x = torch.randn(2, 3, 4)
    z = torch.randn(3, 5, dtype=torch.complex64)
    for name, op, args in (
            ("abs", torch.abs, (x.transpose(0, 2),)), ("abs", torch.abs, (z.t()[:, :-1],)),
            ("add_Tensor", torch.add, (x.permute(1, 2, 0), torch.randn(4, 2), 1.0)),
            ("mul_Tensor", torch.mul, (torch.randn(4, 1), x.transpose(1, 2))),
            ("mul_Scalar", torch.mul, (x[:, ::2].transpose(0, 1), 3.0)), ("angle", torch.angle, (z.t(),))):
        devices = [as_device(a) if isinstance(a, torch.Tensor) else None for a in args]
        r0 = ffi.new("AtenTensorHandle*")
        code = getattr(lib, f"aoti_torch_mps_{name}")(*[d.handle if d else a for d, a in zip(devices, args)], r0)
        assert code == 0, etmetal_py.last_error()
        got = Tensor(r0[0])
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        expected = op(*tensors, *([args[-1]] if name == "mul_Scalar" else []),
                      **({"alpha": args[-1]} if name == "add_Tensor" else {}))
        meta = op(*[t.to("meta") for t in tensors], *([args[-1]] if name == "mul_Scalar" else []),
                  **({"alpha": args[-1]} if name == "add_Tensor" else {}))
        assert got.strides == meta.stride(), (name, got.strides, meta.stride())
        torch.testing.assert_close(got.torch(), expected, rtol=1e-6, atol=1e-6)
