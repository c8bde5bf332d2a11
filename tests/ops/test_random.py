"""The random-number fallbacks (aoti_torch_mps_rand*, randn*, randint*, uniform,
normal_functional, exponential, bernoulli_) and the default generator's seed: distributions
against torch's own samples and exact moments (statistics, not bits: etmetal's bit generator is
not torch's), the seed semantics (a seeded sequence of calls repeats; each call draws fresh
values), dtypes, strided in-place targets, empty and 0-dim results, and bad input."""

import math

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

CODES = {torch.float32: 6, torch.float16: 5, torch.bfloat16: 15, torch.int64: 4, torch.int32: 3,
         torch.int16: 2, torch.int8: 1, torch.uint8: 0, torch.bool: 11}
N = 100_000
# Two-sample Kolmogorov-Smirnov critical value at significance 1e-4 for two samples of N.
KS_LIMIT = math.sqrt(-math.log(1e-4 / 2) / 2) * math.sqrt(2 / N)


def seed(value):
    etmetal_py.check(lib.etmetal_manual_seed(value))


def ks_statistic(a, b):
    a, b = a.double().flatten().sort().values, b.double().flatten().sort().values
    points = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, points, right=True).double() / a.numel()
    cdf_b = torch.searchsorted(b, points, right=True).double() / b.numel()
    return float((cdf_a - cdf_b).abs().max())


def dtype_ptr(dtype):
    return ffi.NULL if dtype is None else ffi.new("int32_t*", CODES[dtype])


def size_args(size):
    return ffi.new("int64_t[]", list(size) or [0]), len(size)


def factory(name, *leading, size=(N,), dtype=None, generator=ffi.NULL, layout=ffi.NULL, device=ffi.NULL):
    r0 = ffi.new("AtenTensorHandle*")
    sizes, count = size_args(size)
    function = getattr(lib, name)
    middle = (generator,) if name.endswith("_generator") else ()
    code = function(*leading, sizes, count, *middle, dtype_ptr(dtype), layout, device, 0, ffi.NULL, r0)
    return code, r0


def made(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def like(name, x, *leading, dtype=None):
    t = as_device(x)
    r0 = ffi.new("AtenTensorHandle*")
    code = getattr(lib, name)(t.handle, *leading, dtype_ptr(dtype), ffi.NULL, ffi.NULL, 0, ffi.NULL, ffi.NULL, r0)
    return made(code, r0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rand_and_randn_follow_torchs_distributions(dtype):
    seed(1)
    uniform = made(*factory("aoti_torch_mps_rand", dtype=dtype))
    assert uniform.dtype == dtype and uniform.shape == (N,)
    assert float(uniform.min()) >= 0 and float(uniform.max()) < 1
    assert ks_statistic(uniform, torch.rand(N, dtype=dtype)) < KS_LIMIT
    normal = made(*factory("aoti_torch_mps_randn", dtype=dtype))
    assert abs(float(normal.double().mean())) < 5 / math.sqrt(N)
    assert abs(float(normal.double().std()) - 1) < 0.01
    assert ks_statistic(normal, torch.randn(N, dtype=dtype)) < KS_LIMIT


def test_generator_variants_and_like_functions():
    seed(2)
    assert ks_statistic(made(*factory("aoti_torch_mps_rand_generator")), torch.rand(N)) < KS_LIMIT
    assert ks_statistic(made(*factory("aoti_torch_mps_randn_generator")), torch.randn(N)) < KS_LIMIT
    template = torch.zeros(400, 500).t()  # strided: the result is contiguous, of its shape
    for name, reference in (("aoti_torch_mps_rand_like", torch.rand), ("aoti_torch_mps_randn_like", torch.randn)):
        out = like(name, template)
        assert out.shape == template.shape and out.dtype == torch.float32
        assert ks_statistic(out, reference(N)) < KS_LIMIT
        out = like(name.replace("_like", "_like_generator"), template, ffi.NULL, dtype=torch.float16)
        assert out.dtype == torch.float16 and ks_statistic(out, reference(N)) < KS_LIMIT


@pytest.mark.parametrize("dtype, low, high", [(torch.int64, -5, 7), (torch.int32, 0, 1000), (torch.int16, -300, 300),
                                              (torch.int8, -128, 128), (torch.uint8, 0, 256), (torch.bool, 0, 2),
                                              (torch.float32, 3, 10), (torch.float16, -20, 20)], ids=str)
def test_randint_is_uniform_over_its_range(dtype, low, high):
    seed(3)
    out = made(*factory("aoti_torch_mps_randint_low", low, high, dtype=dtype))
    assert out.dtype == dtype
    values = out.long()
    assert int(values.min()) == low and int(values.max()) == high - 1
    counts = torch.bincount(values - low, minlength=high - low).double()
    expected = N / (high - low)
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    dof = high - low - 1
    assert chi_square < dof + 6 * math.sqrt(2 * dof)  # ~4 sigma of the chi-square distribution
    default = made(*factory("aoti_torch_mps_randint", 10, size=(1000,)))
    assert default.dtype == torch.int64 and 0 <= int(default.min()) and int(default.max()) < 10
    like_ints = like("aoti_torch_mps_randint_like_low_dtype", torch.zeros(50, 40, dtype=torch.int32), -3, 3)
    assert like_ints.dtype == torch.int32 and set(like_ints.unique().tolist()) == set(range(-3, 3))
    like_ints = like("aoti_torch_mps_randint_like", torch.zeros(2000), 4)
    assert like_ints.dtype == torch.float32 and set(like_ints.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    generated = made(*factory("aoti_torch_mps_randint_generator", 5, size=(1000,)))
    assert set(generated.unique().tolist()) == set(range(5))


def test_randint_low_out_fills_seeds_over_the_whole_int64_range():
    # What Inductor calls for the seeds of its generated random kernels.
    target = torch.zeros(64, 2, dtype=torch.int64)
    view = target[:, 0]  # strided
    device = as_device(view)
    sizes, count = size_args(view.shape)
    assert lib.aoti_torch_mps_randint_low_out(device.handle, -2 ** 63, 2 ** 63 - 1, sizes, count) == 0, \
        etmetal_py.last_error()
    seeds = device.torch()
    assert seeds.unique().numel() == 64
    assert int((seeds < 0).sum()) > 10 and int((seeds > 0).sum()) > 10
    assert int(seeds.abs().max()) > 2 ** 60  # 64 random bits, not 32
    whole = device.device_base.torch().view(64, 2)
    assert torch.equal(whole[:, 1], target[:, 1])  # the other column is untouched


def test_uniform_normal_exponential_of_selfs_shape_and_dtype():
    seed(4)
    template = torch.zeros(N // 100, 100, dtype=torch.float16)[:, ::1]
    t = as_device(template)
    r0 = ffi.new("AtenTensorHandle*")
    assert lib.aoti_torch_mps_uniform(t.handle, -2.0, 3.0, ffi.NULL, r0) == 0
    out = Tensor(r0[0]).torch()
    assert out.dtype == torch.float16 and out.shape == template.shape
    assert float(out.min()) >= -2 and float(out.max()) < 3
    assert ks_statistic(out, torch.empty(N).uniform_(-2, 3)) < KS_LIMIT
    assert lib.aoti_torch_mps_normal_functional(t.handle, 5.0, 0.5, ffi.NULL, r0) == 0
    assert ks_statistic(Tensor(r0[0]).torch(), torch.empty(N).normal_(5, 0.5)) < KS_LIMIT * 2
    assert lib.aoti_torch_mps_exponential(t.handle, 4.0, ffi.NULL, r0) == 0
    out = Tensor(r0[0]).torch()
    assert float(out.min()) >= 0
    assert ks_statistic(out, torch.empty(N).exponential_(4.0)) < KS_LIMIT * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool], ids=str)
def test_bernoulli_in_place_on_views(dtype):
    seed(5)
    base = torch.full((N // 100, 200), 7, dtype=dtype) if dtype != torch.bool else torch.ones(N // 100, 200, dtype=dtype)
    view = base[:, ::2]
    device = as_device(view)
    assert lib.aoti_torch_mps_bernoulli__float(device.handle, 0.3, ffi.NULL) == 0, etmetal_py.last_error()
    got = device.torch()
    assert set(got.double().unique().tolist()) <= {0.0, 1.0}
    assert abs(float(got.double().mean()) - 0.3) < 5 * math.sqrt(0.21 / view.numel())
    whole = device.device_base.torch().view(base.shape)
    assert torch.equal(whole[:, 1::2], base[:, 1::2])  # elements outside the view are untouched
    probabilities = torch.tensor([0.0, 1.0, 0.25, 0.5] * 25, dtype=torch.float32)
    target = as_device(torch.zeros(2000, 100, dtype=dtype))
    p = as_device(probabilities)
    assert lib.aoti_torch_mps_bernoulli__Tensor(target.handle, p.handle, ffi.NULL) == 0, etmetal_py.last_error()
    means = target.torch().double().mean(0)
    assert torch.equal(means[0::4], torch.zeros(25, dtype=torch.float64))
    assert torch.equal(means[1::4], torch.ones(25, dtype=torch.float64))
    assert float((means[2::4] - 0.25).abs().max()) < 0.06


def test_seed_semantics():
    seed(1234)
    first, second = made(*factory("aoti_torch_mps_rand", size=(10,))), made(*factory("aoti_torch_mps_rand", size=(5,)))
    seed(1234)
    together = made(*factory("aoti_torch_mps_rand", size=(15,)))
    assert torch.equal(together, torch.cat([first, second]))  # each call continues the sequence
    assert not torch.equal(first[:5], second)
    seed(1235)
    assert not torch.equal(made(*factory("aoti_torch_mps_rand", size=(10,))), first)
    current = ffi.new("uint64_t*")
    assert lib.etmetal_initial_seed(current) == 0 and current[0] == 1235


def test_empty_and_zero_dim_results():
    scalar = made(*factory("aoti_torch_mps_randn", size=()))
    assert scalar.shape == () and math.isfinite(float(scalar))
    assert made(*factory("aoti_torch_mps_rand", size=(0, 3))).shape == (0, 3)
    assert made(*factory("aoti_torch_mps_randint_low", 0, 3, size=(4, 0))).shape == (4, 0)
    empty = as_device(torch.empty(0, 5))
    assert lib.aoti_torch_mps_bernoulli__float(empty.handle, 0.5, ffi.NULL) == 0
    etmetal_py.synchronize()


def test_bad_input():
    handle = ffi.new("AtenGeneratorHandle*", ffi.cast("AtenGeneratorHandle", 0x1000))
    poisoning_failure(factory("aoti_torch_mps_rand_generator", size=(3,), generator=handle)[0],
                      "generator handles are not supported")
    poisoning_failure(factory("aoti_torch_mps_randint_low", 5, 5, size=(3,))[0], "less than 'to'")
    poisoning_failure(factory("aoti_torch_mps_randint_low", 0, 300, size=(3,), dtype=torch.int8)[0], "out of bounds")
    poisoning_failure(factory("aoti_torch_mps_rand", size=(3,), dtype=torch.int64)[0], "not supported")
    poisoning_failure(factory("aoti_torch_mps_rand", size=(3,), layout=ffi.new("int32_t*", 1))[0], "layout")
    poisoning_failure(factory("aoti_torch_mps_rand", size=(3,), device=ffi.new("int32_t*", 0))[0], "is not mps")
    poisoning_failure(factory("aoti_torch_mps_rand", size=(-1,))[0], "negative dimension")
    t = as_device(torch.zeros(4))
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps_uniform(t.handle, 2.0, 1.0, ffi.NULL, r0), "from=2")
    poisoning_failure(lib.aoti_torch_mps_normal_functional(t.handle, 0.0, -1.0, ffi.NULL, r0), "std >= 0.0")
    poisoning_failure(lib.aoti_torch_mps_exponential(t.handle, 0.0, ffi.NULL, r0), "lambda > 0.0")
    poisoning_failure(lib.aoti_torch_mps_bernoulli__float(t.handle, 1.5, ffi.NULL), "[0, 1]")
    p = as_device(torch.zeros(3))
    poisoning_failure(lib.aoti_torch_mps_bernoulli__Tensor(t.handle, p.handle, ffi.NULL), "does not broadcast")
    sizes, count = size_args((5,))
    poisoning_failure(lib.aoti_torch_mps_randint_low_out(t.handle, 0, 10, sizes, count), "does not resize")
