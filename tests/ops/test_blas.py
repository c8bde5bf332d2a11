"""aoti_torch_mps_addmv, _addbmm and __trilinear against torch eager on the CPU: beta / alpha
(beta 0 ignores NaN in self), broadcast self, transposed and sliced operands, empty batches and
dimensions, bilinear and other expand / sum patterns, float32 / float16 / bfloat16, and bad
input."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, assert_close_scaled, launch_shape, no_leaks_in_module, poisoning_failure  # noqa: F401

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def call(name, self, a, b, beta=1.0, alpha=1.0):
    operands = [as_device(t) for t in (self, a, b)]
    r0 = ffi.new("AtenTensorHandle*")
    return getattr(lib, name)(*(t.handle for t in operands), beta, alpha, r0), r0


def result(code, r0):
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def tolerance(dtype):
    return 2e-6 if dtype == torch.float32 else 2e-2


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_addmv_matches_torch(dtype):
    generator = torch.Generator().manual_seed(0)
    mat = torch.randn(37, 300, generator=generator).to(dtype)
    vec = torch.randn(600, generator=generator).to(dtype)[::2]
    self = torch.randn(37, generator=generator).to(dtype)
    for m, s in ((mat, self), (mat.t().contiguous().t(), self[:1]), (mat[:5, 1:4], self[0])):
        v = vec[:m.shape[1]]
        for beta, alpha in ((1.0, 1.0), (0.5, -2.0), (0.0, 1.5)):
            got = result(*call("aoti_torch_mps_addmv", s, m, v, beta, alpha))
            expected = torch.addmv(s.float(), m.float(), v.float(), beta=beta, alpha=alpha)
            assert got.dtype == dtype and got.shape == expected.shape
            assert_close_scaled(got, expected, tolerance(dtype))
    nan_self = torch.full((37,), float("nan"), dtype=dtype)
    got = result(*call("aoti_torch_mps_addmv", nan_self, mat, vec[:300], 0.0, 1.0))
    assert_close_scaled(got, torch.mv(mat.float(), vec[:300].float()), tolerance(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_addbmm_matches_torch(dtype):
    generator = torch.Generator().manual_seed(1)
    batch1 = torch.randn(5, 9, 40, generator=generator).to(dtype)
    batch2 = torch.randn(5, 40, 11, generator=generator).to(dtype)
    self = torch.randn(9, 11, generator=generator).to(dtype)
    for b1, b2, s in ((batch1, batch2, self), (batch1.transpose(1, 2).contiguous().transpose(1, 2), batch2[:, :, ::2],
                                               self[:1, :6]), (batch1[:0], batch2[:0], self)):
        for beta, alpha in ((1.0, 1.0), (0.25, 3.0), (0.0, 1.0)):
            got = result(*call("aoti_torch_mps_addbmm", s, b1, b2, beta, alpha))
            expected = torch.addbmm(s.float(), b1.float(), b2.float(), beta=beta, alpha=alpha)
            assert got.dtype == dtype and got.shape == expected.shape
            assert_close_scaled(got, expected, tolerance(dtype) * 4)


def test_blas_bad_input():
    mat, vec = torch.randn(3, 4), torch.randn(4)
    poisoning_failure(call("aoti_torch_mps_addmv", torch.randn(3), mat, torch.randn(5))[0], "aoti_torch_mps_addmv",
                      "size mismatch, got input (3), mat (3x4), vec (5)")
    poisoning_failure(call("aoti_torch_mps_addmv", torch.randn(3), mat, mat)[0], "vector + matrix @ vector expected")
    poisoning_failure(call("aoti_torch_mps_addmv", torch.randn(3), mat.half(), vec)[0], "one dtype")
    poisoning_failure(call("aoti_torch_mps_addmv", torch.randn(3).long(), mat.long(), vec.long())[0],
                      "dtype int64 is not supported")
    b1, b2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    poisoning_failure(call("aoti_torch_mps_addbmm", torch.randn(3, 5), b1, b2[:1])[0], "aoti_torch_mps_addbmm",
                      "same number of batches")
    poisoning_failure(call("aoti_torch_mps_addbmm", torch.randn(3, 5), b1, b2[:, :3])[0], "Incompatible matrix sizes")
    poisoning_failure(call("aoti_torch_mps_addbmm", torch.randn(3, 5), b1[0], b2)[0], "batch1 must be a 3D tensor")
    poisoning_failure(call("aoti_torch_mps_addbmm", torch.randn(4, 5), b1, b2)[0], "does not broadcast")


def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    operands = [as_device(t) for t in (i1, i2, i3)]
    lists = [ffi.new("int64_t[]", list(v) or [0]) for v in (expand1, expand2, expand3, sumdim)]
    r0 = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps__trilinear(*(t.handle for t in operands), lists[0], len(expand1), lists[1],
                                         len(expand2), lists[2], len(expand3), lists[3], len(sumdim), unroll_dim, r0)
    return code, r0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_trilinear_matches_torch(dtype, launch_shape):
    generator = torch.Generator().manual_seed(2)
    x1 = torch.randn(4, 3, generator=generator).to(dtype)
    x2 = torch.randn(4, 5, generator=generator).to(dtype)
    weight = torch.randn(6, 3, 5, generator=generator).to(dtype)
    cases = [((x1, weight, x2), ([1, 3], [0], [1, 2], [2, 3])),               # F.bilinear
             ((x1.t().contiguous().t(), weight.transpose(0, 2).contiguous().transpose(0, 2), x2[:, ::1]),
              ([1, 3], [0], [1, 2], [2, 3])),
             ((x1, weight, x2), ([1, 3], [0], [1, 2], [2])),
             ((x1, weight, x2), ([1, 3], [0], [1, 2], [])),
             ((x1, weight, x2), ([1, 3], [0], [1, 2], [0, 1, 2, 3])),          # a 0-dim sum
             ((x1[:0], weight, x2[:0]), ([1, 3], [0], [1, 2], [2, 3]))]
    for (a, b, c), (e1, e2, e3, sumdim) in cases:
        code, r0 = trilinear(a, b, c, e1, e2, e3, sumdim)
        assert code == 0, etmetal_py.last_error()
        got = Tensor(r0[0]).torch()
        expected = torch.ops.aten._trilinear(a.float(), b.float(), c.float(), e1, e2, e3, sumdim, 1)
        assert got.dtype == dtype and got.shape == expected.shape
        if expected.numel():
            assert_close_scaled(got, expected, tolerance(dtype) * 4)
    # A size-1 dimension broadcasts (torch's own kernel refuses this case's in-place sum).
    code, r0 = trilinear(x1, weight, x2[:1], [1, 3], [0], [1, 2], [2, 3])
    assert code == 0, etmetal_py.last_error()
    expected = torch.bilinear(x1.float(), x2[:1].expand(4, 5).float(), weight.float())
    assert_close_scaled(Tensor(r0[0]).torch(), expected, tolerance(dtype) * 4)


# Many summed terms per output (nn.Bilinear of 40 x 50 features: 2000): with the GPU launch shape
# a simdgroup per output, its lanes splitting the terms; 4 simdgroups per threadgroup, 7 x 3
# outputs leave the last group part empty; an operand strided.
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_trilinear_of_many_terms_matches_torch(dtype, launch_shape):
    generator = torch.Generator().manual_seed(3)
    x1 = torch.randn(7, 40, generator=generator).to(dtype)
    x2 = torch.randn(50, 7, generator=generator).to(dtype).t()
    weight = torch.randn(3, 40, 50, generator=generator).to(dtype)
    code, r0 = trilinear(x1, weight, x2, [1, 3], [0], [1, 2], [2, 3])
    assert code == 0, etmetal_py.last_error()
    expected = torch.bilinear(x1.double(), x2.double(), weight.double())
    assert_close_scaled(Tensor(r0[0]).torch(), expected, tolerance(dtype) * 4)


# nn.Bilinear's form with 64 or more terms runs as two batched products (trilinear.cpp:
# bilinear_products), the longer feature dimension summed first: in1 > in2 and in1 < in2, a
# transposed weight and operand, a broadcast batch (stride 0) and a single output feature.
# Another form of as many terms (i1 varying along j) keeps the term-by-term kernels.
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_trilinear_bilinear_form_as_products_matches_torch(dtype, launch_shape):
    generator = torch.Generator().manual_seed(4)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    weight = randn(5, 24, 9)
    cases = [(randn(6, 24), weight, randn(6, 9)),
             (randn(6, 9), randn(9, 5, 24).transpose(0, 1), randn(24, 6).t()),
             (randn(1, 24).expand(6, 24), weight, randn(6, 9)),
             (randn(3, 70), randn(1, 70, 2), randn(3, 2))]
    for x1, w, x2 in cases:
        code, r0 = trilinear(x1, w, x2, [1, 3], [0], [1, 2], [2, 3])
        assert code == 0, etmetal_py.last_error()
        got = Tensor(r0[0]).torch()
        expected = torch.nn.functional.bilinear(x1.double(), x2.double(), w.double())
        assert got.dtype == dtype and got.shape == expected.shape
        assert_close_scaled(got, expected, tolerance(dtype) * 4)
    x1, x2 = randn(6, 24, 9), randn(6, 9)
    code, r0 = trilinear(x1, weight, x2, [1], [0], [1, 2], [2, 3])
    assert code == 0, etmetal_py.last_error()
    expected = torch.ops.aten._trilinear(x1.double(), weight.double(), x2.double(), [1], [0], [1, 2], [2, 3], 1)
    assert_close_scaled(Tensor(r0[0]).torch(), expected, tolerance(dtype) * 4)


def test_trilinear_bad_input():
    x1, x2, weight = torch.randn(4, 3), torch.randn(4, 5), torch.randn(6, 3, 5)
    poisoning_failure(trilinear(x1, weight, x2, [1, 3], [0], [1, 2], [2, 3], 4)[0], "aoti_torch_mps__trilinear",
                      "unroll_dim must be in [0,3]")
    poisoning_failure(trilinear(x1[:2], weight, x2, [1, 3], [0], [1, 2], [2, 3])[0], "non-broadcast dimensions must match")
    poisoning_failure(trilinear(x1, weight, x2, [1], [0], [1, 2], [2, 3])[0], "same rank once expanded")
    poisoning_failure(trilinear(x1, weight, x2, [1, 3], [0], [1, 2], [2, 9])[0], "Dimension out of range")
    poisoning_failure(trilinear(x1.half(), weight, x2, [1, 3], [0], [1, 2], [2, 3])[0], "expected scalar type")
