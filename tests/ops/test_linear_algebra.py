"""The linear-algebra fallbacks (triangular_solve, linalg_solve_triangular, cholesky_solve,
cholesky_inverse, lu_unpack) against torch eager on the CPU: upper / lower, transposed,
unit-diagonal, left / right, broadcast batches, strided (transposed, sliced) operands, square and
rectangular LU, empty batches, and bad input (including a pivot out of range, which only the
kernel sees)."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, compile_and_load, no_leaks_in_module, poisoning_failure  # noqa: F401


def handles(count):
    return [ffi.new("AtenTensorHandle*") for _ in range(count)]


def call(name, tensors, flags, outputs, read=True):
    """(code, the outputs as torch tensors, or as device tensors unless `read`)."""
    devices = [as_device(t) for t in tensors]
    out = handles(outputs)
    code = getattr(lib, f"aoti_torch_mps_{name}")(*(d.handle for d in devices), *flags, *out)
    if code != 0:
        return code, None
    return code, [Tensor(o[0]).torch() if read else Tensor(o[0]) for o in out]


def results(code, values):
    assert code == 0, etmetal_py.last_error()
    return values


def well_conditioned_triangular(*shape, upper, seed):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(*shape, generator=generator) * 0.3
    a = a.triu() if upper else a.tril()
    return a + torch.diag_embed(torch.rand(shape[:-1], generator=generator) + 1.0)


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
def test_triangular_solve_matches_torch():
    generator = torch.Generator().manual_seed(0)
    for upper in (False, True):
        a = well_conditioned_triangular(2, 1, 6, 6, upper=upper, seed=1)
        b = torch.randn(3, 6, 4, generator=generator)
        for transpose in (False, True):
            for unit in (False, True):
                for aa, bb in ((a, b), (a.transpose(-1, -2).contiguous().transpose(-1, -2), b[..., ::2]),
                               (a[0, 0], b[0])):
                    solution, coefficient = results(*call("triangular_solve", (bb, aa), (upper, transpose, unit), 2))
                    expected = torch.triangular_solve(bb, aa, upper=upper, transpose=transpose, unitriangular=unit)
                    torch.testing.assert_close(solution, expected.solution, rtol=1e-4, atol=1e-5)
                    assert torch.equal(coefficient, expected.cloned_coefficient)


def test_linalg_solve_triangular_matches_torch():
    generator = torch.Generator().manual_seed(4)
    for upper in (False, True):
        a = well_conditioned_triangular(2, 1, 5, 5, upper=upper, seed=5)
        for left in (True, False):
            b = torch.randn(3, 5, 4, generator=generator) if left else torch.randn(3, 4, 5, generator=generator)
            for unit in (False, True):
                for aa, bb in ((a, b), (a.transpose(-1, -2).contiguous().transpose(-1, -2), b.transpose(-1, -2)
                                        .contiguous().transpose(-1, -2)[1:]),
                               (a[1, 0], b[0, :, 1:] if left else b[0, 1:])):
                    (got,) = results(*call("linalg_solve_triangular", (aa, bb), (upper, left, unit), 1))
                    want = torch.linalg.solve_triangular(aa, bb, upper=upper, left=left, unitriangular=unit)
                    assert got.shape == want.shape and got.stride() == want.stride()
                    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    (got,) = results(*call("linalg_solve_triangular", (torch.eye(3), torch.randn(0, 3, 2)), (0, 1, 0), 1))
    assert got.shape == (0, 3, 2)


@pytest.mark.slow
def test_compiled_model_reaches_linalg_solve_triangular(tmp_path):
    # torch 2.13 has no C shim for it: without etmetal's, Inductor would call libtorch's proxy.
    class Whitening(torch.nn.Module):
        def forward(self, factor, x):
            return torch.linalg.solve_triangular(factor, x.relu() + 1, upper=False, left=False) * 2

    generator = torch.Generator().manual_seed(6)
    args = (well_conditioned_triangular(4, 4, upper=False, seed=7), torch.randn(3, 4, generator=generator))
    runner = compile_and_load(Whitening(), args, tmp_path, ["aoti_torch_mps_linalg_solve_triangular"])
    torch.testing.assert_close(runner(*args), Whitening()(*args), rtol=1e-4, atol=1e-5)


def test_cholesky_solve_and_inverse_match_torch():
    generator = torch.Generator().manual_seed(2)
    m = torch.randn(2, 5, 5, generator=generator)
    spd = m @ m.transpose(-1, -2) + 5 * torch.eye(5)
    b = torch.randn(2, 5, 3, generator=generator)
    for upper in (False, True):
        factor = torch.linalg.cholesky(spd, upper=upper)
        for f, rhs in ((factor, b), (factor.transpose(-1, -2).contiguous().transpose(-1, -2), b[:1]),
                       (factor[0], b)):
            (got,) = results(*call("cholesky_solve", (rhs, f), (upper,), 1))
            torch.testing.assert_close(got, torch.cholesky_solve(rhs, f, upper=upper), rtol=1e-4, atol=1e-5)
            (inverse,) = results(*call("cholesky_inverse", (f,), (upper,), 1))
            torch.testing.assert_close(inverse, torch.cholesky_inverse(f, upper=upper), rtol=1e-4, atol=1e-5)


def test_lu_unpack_matches_torch():
    generator = torch.Generator().manual_seed(3)
    for shape in ((5, 5), (2, 3, 4, 6), (6, 4), (1, 0, 3, 3)):
        lu, pivots = torch.linalg.lu_factor(torch.randn(*shape, generator=generator))
        for data, piv in ((True, True), (False, True), (True, False)):
            got = results(*call("lu_unpack", (lu, pivots), (data, piv), 3))
            expected = torch.lu_unpack(lu, pivots, unpack_data=data, unpack_pivots=piv)
            for actual, want in zip(got, expected):
                assert actual.shape == want.shape and torch.equal(actual, want)
    lu, pivots = torch.linalg.lu_factor(torch.randn(4, 6, 6, generator=generator))
    got = results(*call("lu_unpack", (lu.transpose(-1, -2).contiguous().transpose(-1, -2)[::2], pivots[::2]),
                        (True, True), 3))
    for actual, want in zip(got, torch.lu_unpack(lu[::2], pivots[::2])):
        assert torch.equal(actual, want)


def test_linear_algebra_bad_input():
    a, b = torch.eye(3), torch.randn(3, 2)
    poisoning_failure(call("triangular_solve", (b, a[:, :2]), (0, 0, 0), 2)[0], "aoti_torch_mps_triangular_solve",
                      "A must be batches of square matrices")
    poisoning_failure(call("triangular_solve", (torch.randn(4, 2), a), (0, 0, 0), 2)[0], "Incompatible matrix sizes")
    poisoning_failure(call("triangular_solve", (b[0], a), (0, 0, 0), 2)[0], "Expected b to have at least 2 dimensions")
    poisoning_failure(call("triangular_solve", (b.half(), a.half()), (0, 0, 0), 2)[0], "take float32")
    poisoning_failure(call("linalg_solve_triangular", (a, b), (0, 0, 0), 1)[0],
                      "aoti_torch_mps_linalg_solve_triangular: linalg_solve_triangular: incompatible shapes of A and B "
                      "for the equation XA = B (3x3 and 3x2)")
    poisoning_failure(call("linalg_solve_triangular", (a[:2], b), (0, 1, 0), 1)[0], "A must be batches of square")
    poisoning_failure(call("linalg_solve_triangular", (a, b[0]), (0, 1, 0), 1)[0], "at least 2 dimensions")
    poisoning_failure(call("cholesky_solve", (torch.randn(2, 3, 2), torch.eye(3).repeat(3, 1, 1)), (0,), 1)[0],
                      "aoti_torch_mps_cholesky_solve", "do not broadcast")
    poisoning_failure(call("cholesky_inverse", (a[:2],), (0,), 1)[0], "square matrices")
    lu, pivots = torch.linalg.lu_factor(torch.randn(3, 3))
    poisoning_failure(call("lu_unpack", (lu, pivots.long()), (1, 1), 3)[0], "aoti_torch_mps_lu_unpack", "torch.int32")
    poisoning_failure(call("lu_unpack", (lu, pivots[:2]), (1, 1), 3)[0], "does not match LU_data")
    code, _ = call("lu_unpack", (lu, torch.tensor([1, 7, 3], dtype=torch.int32)), (1, 1), 3, read=False)
    assert code == 0  # the kernel finds the bad pivot; the next synchronize reports it
    with pytest.raises(etmetal_py.EtmetalError, match=r"pivot 7 is out of range \[1, 3\]"):
        etmetal_py.synchronize()
