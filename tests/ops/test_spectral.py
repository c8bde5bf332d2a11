"""Complex dtypes and the spectral fallbacks through the C ABI, against torch eager on the CPU:
complex32 / complex64 / complex128 tensors (element sizes, round trips, copies converting to and
from real dtypes), view_as_real / view_as_complex (strides, offsets, the errors torch gives),
_fft_r2c / _fft_c2c / _fft_c2r (lengths with every kind of factor, including primes; several
dimensions in any order; strided and batched inputs; every normalization; one- and two-sided)
against torch's float64 transforms, polar (broadcast, strided), and bad input.
test_compiled_spectral.py (slow) reaches them through a compiled model."""

import math
import warnings

import pytest
import torch

import etmetal_py
from torch._subclasses.fake_tensor import FakeTensorMode
from etmetal_py import Tensor, ffi, lib
from etmetal_testing import fails
from ops_testing import as_device, assert_close_scaled, no_leaks_in_module, poisoning_failure  # noqa: F401

COMPLEX = [torch.complex32, torch.complex64, torch.complex128]
# float32 transforms against float64 references: errors grow like log(n) * eps * max |X|.
FFT_TOLERANCE = 2e-6


def handle_out():
    return ffi.new("AtenTensorHandle*")


def test_complex_dtype_codes_and_element_sizes():
    assert (lib.aoti_torch_dtype_complex32(), lib.aoti_torch_dtype_complex64(),
            lib.aoti_torch_dtype_complex128()) == (8, 9, 10)
    for code, dtype in zip((8, 9, 10), COMPLEX):
        assert lib.aoti_torch_dtype_element_size(code) == torch.empty(0, dtype=dtype).element_size()


def parts(t):
    """t's values in a dtype torch compares (it has few complex32 kernels)."""
    return torch.view_as_real(t).float() if t.dtype == torch.complex32 else t


def torch_copy(source, target):
    """torch's copy_ of source into a new tensor of dtype target (complex32 through complex64:
    torch has no complex32 conversions from most dtypes; either way rounds through float32)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns (once) that complex -> real drops a part
        if target == torch.complex32:
            return torch_copy(source, torch.complex64).to(torch.complex32)
        if source.dtype == torch.complex32:
            return torch_copy(source.to(torch.complex64), target)
        return torch.empty(source.shape, dtype=target).copy_(source)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_tensors_round_trip_and_copy(dtype):
    x = torch.randn(3, 5, dtype=torch.complex64).to(dtype)
    device = as_device(x)
    assert device.dtype == {torch.complex32: 8, torch.complex64: 9, torch.complex128: 10}[dtype]
    assert torch.equal(parts(device.torch()), parts(x))
    assert (device.numpy() == x.to(torch.complex64 if dtype == torch.complex32 else dtype).numpy()).all()
    strided = as_device(x.t()[1:, ::2])
    assert torch.equal(parts(strided.torch()), parts(x.t()[1:, ::2]))
    # aoti_torch_copy_ converts as torch's copy_ does: complex <-> complex by parts, real -> (x, 0),
    # complex -> real keeps the real part, complex -> bool tests both parts.
    sources = [x, torch.randn(3, 5) * 4, torch.tensor([[0, 1j, 2.5, 0, -3 + 1j]] * 3).to(dtype)]
    for source in sources:
        for target in (torch.complex64, torch.complex128, torch.float32, torch.int32, torch.bool, dtype):
            want = torch_copy(source, target)
            destination = Tensor.empty((3, 5), target)
            strided_source = as_device(source.t().contiguous().t())
            etmetal_py.check(lib.aoti_torch_copy_(destination.handle, strided_source.handle, 0))
            assert torch.equal(parts(destination.torch()), parts(want)), (source.dtype, target)


def view(function, tensor):
    r0 = handle_out()
    code = function(tensor.handle, r0)
    return code, r0


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_view_as_real_and_complex_match_torch(dtype):
    base = torch.randn(4, 6, dtype=torch.complex64).to(dtype)
    for x in (base, base.t(), base[1:, 2:5], base[::2, ::3], base[2, 3]):
        device = as_device(x)
        code, r0 = view(lib.aoti_torch_mps_view_as_real, device)
        assert code == 0, etmetal_py.last_error()
        real_view = Tensor(r0[0])
        want = torch.view_as_real(x)
        assert (real_view.sizes, real_view.strides) == (tuple(want.shape), want.stride())
        assert torch.equal(real_view.torch(), want)
        code, r0 = view(lib.aoti_torch_mps_view_as_complex, real_view)
        assert code == 0, etmetal_py.last_error()
        back = Tensor(r0[0])
        assert (back.sizes, back.strides, back.dtype) == (tuple(x.shape), x.stride(), device.dtype)
        assert torch.equal(parts(back.torch()), parts(x))
    pairs = torch.randn(3, 4, 2, dtype=torch.float64).to(torch.view_as_real(base).dtype)
    for x in (pairs, pairs[1:], pairs[:, ::2]):
        code, r0 = view(lib.aoti_torch_mps_view_as_complex, as_device(x))
        assert code == 0, etmetal_py.last_error()
        got = Tensor(r0[0])
        want = torch.view_as_complex(x)
        assert (got.sizes, got.strides) == (tuple(want.shape), want.stride())
        assert torch.equal(parts(got.torch()), parts(want))


def test_views_reject_what_torch_rejects():
    pairs = torch.randn(3, 4, 2)
    for x, fragment in ((pairs.transpose(1, 2), "last dimension of size 2"),
                        (torch.randn(2, 3).t(), "last dimension with stride 1"),
                        (torch.randn(3, 3, 2)[:, ::1, :].as_strided((3, 2), (3, 1)), "stride divisible by 2"),
                        (pairs.flatten()[1:7].view(3, 2), "storage_offset divisible by 2"),
                        (torch.tensor(1.0), "one or more dimensions"),
                        (torch.ones(3, 2, dtype=torch.int32), "half, float and double")):
        with pytest.raises(RuntimeError):
            torch.view_as_complex(x)
        fails(view(lib.aoti_torch_mps_view_as_complex, as_device(x))[0], "aoti_torch_mps_view_as_complex", fragment)
    fails(view(lib.aoti_torch_mps_view_as_real, as_device(pairs))[0], "only supported for complex tensors")


def fft_call(function, x, dims, normalization, flag):
    r0 = handle_out()
    device = as_device(x)
    code = function(device.handle, ffi.new("int64_t[]", list(dims)), len(dims), normalization, flag, r0)
    return code, r0


def run_fft(function, x, dims, normalization, flag):
    code, r0 = fft_call(function, x, dims, normalization, flag)
    assert code == 0, etmetal_py.last_error()
    result = Tensor(r0[0])
    values = result.torch()
    values.device_strides = result.strides
    return values


def meta_strides(op, x, *args):
    """The strides torch's meta function gives op's result: what compiled code indexes it with."""
    with FakeTensorMode():
        return op(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype), *args).stride()


def check_fft(got, want, strides=None):
    assert got.dtype == (torch.complex64 if want.is_complex() else torch.float32)
    assert got.shape == want.shape
    if strides is not None:
        assert got.device_strides == strides
    assert_close_scaled(torch.view_as_real(got) if got.is_complex() else got,
                        torch.view_as_real(want) if want.is_complex() else want, FFT_TOLERANCE)


@pytest.fixture(params=["cpu", "gpu"])
def launch_shape(request, monkeypatch):
    """Runs a test under each launch shape: the GPU's transforms in threadgroup memory
    (fft_group_*) and the CPU device's passes through device memory."""
    monkeypatch.setenv("ETMETAL_OP_SHAPES", request.param)
    return request.param


# Powers of two and four, small and large primes, mixed factors.
LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 30, 64, 97, 100, 128, 360]


@pytest.mark.parametrize("onesided", [True, False])
def test_fft_r2c_every_length_matches_torch(onesided, launch_shape):
    generator = torch.Generator().manual_seed(0)
    for i, n in enumerate(LENGTHS):
        x = torch.randn(3, n, generator=generator)
        normalization = i % 3
        got = run_fft(lib.aoti_torch_mps__fft_r2c, x, [-1], normalization, int(onesided))
        check_fft(got, torch.ops.aten._fft_r2c(x.double(), [1], normalization, onesided))


def test_fft_r2c_several_dims_strided_and_batched(launch_shape):
    generator = torch.Generator().manual_seed(1)
    base = torch.randn(4, 6, 10, 5, generator=generator)
    for i, x in enumerate((base, base.transpose(1, 3), base[:, 1:, ::3], base.permute(2, 0, 3, 1)[1:])):
        for j, dims in enumerate(([0, 2], [2, 0], [-1, 1], [0, 1, 2, 3], [1])):
            for onesided in ((i + j) % 2 == 0,):
                got = run_fft(lib.aoti_torch_mps__fft_r2c, x, dims, 2, int(onesided))
                check_fft(got, torch.ops.aten._fft_r2c(x.double(), [d % 4 for d in dims], 2, onesided),
                          meta_strides(torch.ops.aten._fft_r2c, x, [d % 4 for d in dims], 2, onesided))


def test_fft_c2c_forward_and_inverse_match_torch(launch_shape):
    generator = torch.Generator().manual_seed(2)
    for n in (1, 6, 16, 17, 45, 128):
        x = torch.randn(2, n, 3, dtype=torch.complex64, generator=generator)
        for forward in (True, False):
            for normalization in (0, 1, 2):
                got = run_fft(lib.aoti_torch_mps__fft_c2c, x, [1], normalization, int(forward))
                check_fft(got, torch.ops.aten._fft_c2c(x.to(torch.complex128), [1], normalization, forward))
    base = torch.randn(5, 8, 9, dtype=torch.complex64, generator=generator)
    for x in (base, base.transpose(0, 2), base[1:, ::2], base[..., 3:]):
        for dims in ([0, 1, 2], [2, 0], [1]):
            got = run_fft(lib.aoti_torch_mps__fft_c2c, x, dims, 1, 0)
            check_fft(got, torch.ops.aten._fft_c2c(x.to(torch.complex128), dims, 1, False),
                      meta_strides(torch.ops.aten._fft_c2c, x, dims, 1, False))
    # No dimension: a copy, as torch gives.
    assert torch.equal(run_fft(lib.aoti_torch_mps__fft_c2c, base[:, 1], [], 2, 1), base[:, 1])


def test_fft_c2r_matches_torch(launch_shape):
    generator = torch.Generator().manual_seed(3)
    for last_dim_size in (1, 2, 7, 8, 16, 33, 100):
        spectrum = torch.randn(3, last_dim_size // 2 + 1, dtype=torch.complex64, generator=generator)
        for normalization in (0, 1, 2):
            got = run_fft(lib.aoti_torch_mps__fft_c2r, spectrum, [1], normalization, last_dim_size)
            check_fft(got, torch.ops.aten._fft_c2r(spectrum.to(torch.complex128), [1], normalization, last_dim_size))
    base = torch.randn(4, 6, 9, dtype=torch.complex64, generator=generator)
    for x, dims, size in ((base, [0, 2], 16), (base.transpose(1, 2), [2, 1], 17), (base[:, ::2], [0, 1, 2], 17),
                          (base, [1], 11)):
        got = run_fft(lib.aoti_torch_mps__fft_c2r, x, dims, 2, size)
        check_fft(got, torch.ops.aten._fft_c2r(x.to(torch.complex128), dims, 2, size),
                  meta_strides(torch.ops.aten._fft_c2r, x, dims, 2, size))


# Lengths with a large prime factor: transformed as chirp-z (Bluestein) convolutions through
# power-of-two transforms (fft.cpp: chirp_z_is_cheaper); 47 by its own passes.
CHIRP_LENGTHS = [31, 47, 127, 1031, 2 * 1031, 2053, 4099]


def test_fft_of_lengths_with_a_large_prime_factor_matches_torch(launch_shape):
    generator = torch.Generator().manual_seed(6)
    for i, n in enumerate(CHIRP_LENGTHS):
        normalization = i % 3
        z = torch.randn(3, n, dtype=torch.complex64, generator=generator)
        for forward in (True, False):
            got = run_fft(lib.aoti_torch_mps__fft_c2c, z, [1], normalization, int(forward))
            check_fft(got, torch.ops.aten._fft_c2c(z.to(torch.complex128), [1], normalization, forward))
        x = torch.randn(2, n, generator=generator)
        for onesided in (True, False):
            got = run_fft(lib.aoti_torch_mps__fft_r2c, x, [1], normalization, int(onesided))
            check_fft(got, torch.ops.aten._fft_r2c(x.double(), [1], normalization, onesided))
        # c2r: irfft, and hfft (torch.fft.hfft is a c2r of the conjugate).
        spectrum = torch.randn(2, n // 2 + 1, dtype=torch.complex64, generator=generator)
        got = run_fft(lib.aoti_torch_mps__fft_c2r, spectrum, [1], normalization, n)
        check_fft(got, torch.ops.aten._fft_c2r(spectrum.to(torch.complex128), [1], normalization, n))
        check_fft(got, torch.fft.hfft(spectrum.conj().to(torch.complex128), n,
                                      norm=("backward", "ortho", "forward")[normalization]))


def test_fft_of_large_primes_batched_strided_and_over_several_dims(launch_shape):
    generator = torch.Generator().manual_seed(7)
    base = torch.randn(4, 1031, 3, dtype=torch.complex64, generator=generator)
    for x, dims in ((base, [1]), (base.transpose(0, 2), [2, 0]), (base[1:, ::2], [1, 2]), (base[..., 1], [1, 0])):
        for forward in (True, False):
            got = run_fft(lib.aoti_torch_mps__fft_c2c, x, dims, 1, int(forward))
            check_fft(got, torch.ops.aten._fft_c2c(x.to(torch.complex128), dims, 1, forward),
                      meta_strides(torch.ops.aten._fft_c2c, x, dims, 1, forward))
    real = torch.randn(3, 5, 2 * 1031, generator=generator)
    for x, dims in ((real, [2]), (real.transpose(1, 2), [1]), (real[:, 1:, ::2], [0, 2])):
        got = run_fft(lib.aoti_torch_mps__fft_r2c, x, dims, 2, 1)
        check_fft(got, torch.ops.aten._fft_r2c(x.double(), dims, 2, True),
                  meta_strides(torch.ops.aten._fft_r2c, x, dims, 2, True))
    got = run_fft(lib.aoti_torch_mps__fft_c2r, base, [0, 1], 0, 2061)
    check_fft(got, torch.ops.aten._fft_c2r(base.to(torch.complex128), [0, 1], 0, 2061),
              meta_strides(torch.ops.aten._fft_c2r, base, [0, 1], 0, 2061))


# Lengths for the threadgroup transforms' limits: whole lines up to 4096 (2047: a chirp-z
# convolution of m = 4096), two fft_group_stage dispatches beyond (8192 as 128 x 64, 2^14 as
# 128 x 128), a power-of-two part of 8192 before a radix-3 pass, and line counts that leave a
# threadgroup's columns partly empty.
GROUP_LENGTHS = [(37, 8), (3, 2048), (5, 2047), (2, 4096), (2, 8192), (1, 16384), (2, 3 * 8192), (7, 96)]


def test_fft_lengths_at_the_threadgroup_limits_match_torch(launch_shape):
    generator = torch.Generator().manual_seed(8)
    for i, (lines, n) in enumerate(GROUP_LENGTHS):
        normalization = i % 3
        z = torch.randn(lines, n, dtype=torch.complex64, generator=generator)
        for forward in (True, False):
            got = run_fft(lib.aoti_torch_mps__fft_c2c, z, [1], normalization, int(forward))
            check_fft(got, torch.ops.aten._fft_c2c(z.to(torch.complex128), [1], normalization, forward))
        x = torch.randn(n, lines, generator=generator).t()
        got = run_fft(lib.aoti_torch_mps__fft_r2c, x, [1], normalization, 1)
        check_fft(got, torch.ops.aten._fft_r2c(x.double(), [1], normalization, True))
        spectrum = torch.randn(lines, n // 2 + 1, dtype=torch.complex64, generator=generator)
        got = run_fft(lib.aoti_torch_mps__fft_c2r, spectrum, [1], normalization, n)
        check_fft(got, torch.ops.aten._fft_c2r(spectrum.to(torch.complex128), [1], normalization, n))


def test_fft_round_trip_of_a_long_signal(launch_shape):
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(4))
    spectrum = run_fft(lib.aoti_torch_mps__fft_r2c, x, [1], 0, 1)
    back = run_fft(lib.aoti_torch_mps__fft_c2r, spectrum, [1], 2, 4096)
    torch.testing.assert_close(back, x, rtol=0, atol=1e-5)


def test_fft_empty_batches_and_bad_input():
    got = run_fft(lib.aoti_torch_mps__fft_r2c, torch.randn(0, 8), [1], 0, 1)
    assert got.shape == (0, 5) and got.dtype == torch.complex64
    got = run_fft(lib.aoti_torch_mps__fft_c2r, torch.randn(2, 0, 5, dtype=torch.complex64), [2], 0, 8)
    assert got.shape == (2, 0, 8) and got.dtype == torch.float32
    x, z = torch.randn(3, 8), torch.randn(3, 8, dtype=torch.complex64)
    r2c, c2c, c2r = lib.aoti_torch_mps__fft_r2c, lib.aoti_torch_mps__fft_c2c, lib.aoti_torch_mps__fft_c2r
    poisoning_failure(fft_call(r2c, torch.randn(3, 0), [1], 0, 1)[0], "aoti_torch_mps__fft_r2c",
                      "Invalid number of data points (0)")
    poisoning_failure(fft_call(r2c, x, [1, -1], 0, 1)[0], "appears more than once")
    poisoning_failure(fft_call(r2c, x, [2], 0, 1)[0], "out of range")
    poisoning_failure(fft_call(r2c, z, [1], 0, 1)[0], "expects a float32 input, got complex64")
    poisoning_failure(fft_call(r2c, x.double(), [1], 0, 1)[0], "no 64-bit floating point")
    poisoning_failure(fft_call(c2c, x, [1], 0, 1)[0], "aoti_torch_mps__fft_c2c", "expects a complex64 input")
    poisoning_failure(fft_call(c2c, z, [1], 3, 1)[0], "normalization 3 is not one of")
    poisoning_failure(fft_call(c2r, z, [1], 0, 16)[0], "needs 9 input elements")
    poisoning_failure(fft_call(c2r, z, [1], 0, 0)[0], "Invalid number of data points (0)")


def polar_call(magnitude, angle):
    r0 = handle_out()
    a, b = as_device(magnitude), as_device(angle)
    return lib.aoti_torch_mps_polar(a.handle, b.handle, r0), r0


def test_polar_matches_torch():
    generator = torch.Generator().manual_seed(5)
    magnitude = torch.rand(4, 5, generator=generator) * 3
    angle = (torch.rand(4, 5, generator=generator) - 0.5) * 8 * math.pi
    for a, b in ((magnitude, angle), (magnitude.t(), angle.t()), (magnitude[:, :1], angle),
                 (magnitude[1], angle.flip(1)[::2]), (magnitude[0, 0], angle[0, 0])):
        code, r0 = polar_call(a, b)
        assert code == 0, etmetal_py.last_error()
        result = Tensor(r0[0])
        assert result.strides == torch.polar(a.to("meta"), b.to("meta")).stride()  # what compiled code assumes
        got = result.torch()
        want = torch.polar(a.double(), b.double())
        assert got.dtype == torch.complex64 and got.shape == want.shape
        torch.testing.assert_close(torch.view_as_real(got).double(), torch.view_as_real(want), rtol=0, atol=2e-6)
    code, r0 = polar_call(magnitude[:0], angle[:0])
    assert code == 0 and Tensor(r0[0]).torch().shape == (0, 5)
    poisoning_failure(polar_call(magnitude, angle.double())[0], "aoti_torch_mps_polar", "Expected object of scalar type")
    poisoning_failure(polar_call(magnitude.half(), angle.half())[0], "expects float32 inputs")
    poisoning_failure(polar_call(magnitude, angle[:3])[0], "must match the size")
