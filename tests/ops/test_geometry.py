"""aoti_torch_mps_grid_sampler_3d, aoti_torch_mps__cdist_forward and aoti_torch_mps__pdist_forward
against torch eager on the CPU: every interpolation / padding / align_corners combination, points
outside the input, float32 / float16 / bfloat16, strided inputs and grids; p 0, 1, 2, infinity and
fractional, broadcast batches, empty and zero-column inputs; bad input. test_compiled_geometry.py
(slow) reaches the first two through a compiled model, test_compiled_model_reaches_pdist (slow)
the third, which torch has no C shim for."""

import math

import pytest
import torch
import torch.nn.functional as F

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def sample(input, grid, interpolation, padding, align_corners):
    r0 = ffi.new("AtenTensorHandle*")
    a, b = as_device(input), as_device(grid)
    return lib.aoti_torch_mps_grid_sampler_3d(a.handle, b.handle, interpolation, padding, int(align_corners), r0), r0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_grid_sampler_3d_matches_torch(dtype):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 6, 7, generator=generator).to(dtype)
    # Points reach past the input on every side (padding modes matter), and some sit exactly on
    # voxel centres and halfway between them (nearest rounds halves to even).
    grid = (torch.rand(2, 4, 3, 5, 3, generator=generator) * 3.2 - 1.6).to(dtype)
    grid[0, 0, 0, :3] = torch.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 1.0], [-1 / 7, 1 / 6, 0.2]]).to(dtype)
    tolerance = 2e-6 if dtype == torch.float32 else 2e-2
    for interpolation in (0, 1):
        for padding in (0, 1, 2):
            for align_corners in (False, True):
                for tensor, points in ((x, grid), (x.transpose(2, 4), grid[:, :, :, ::2]),
                                       (x.contiguous(memory_format=torch.channels_last_3d), grid.transpose(1, 3))):
                    code, r0 = sample(tensor, points, interpolation, padding, align_corners)
                    assert code == 0, etmetal_py.last_error()
                    # torch's CPU kernel has no half kernels: the reference samples in float32.
                    expected = torch.ops.aten.grid_sampler_3d(tensor.float(), points.float(), interpolation, padding,
                                                              align_corners)
                    got = Tensor(r0[0]).torch()
                    assert got.dtype == dtype and got.is_contiguous()
                    if interpolation == 1 and dtype != torch.float32:
                        expected = expected.to(dtype)  # nearest copies a voxel: exact after rounding
                        assert torch.equal(got, expected), (interpolation, padding, align_corners)
                    else:
                        torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance)


def test_grid_sampler_3d_empty_and_bad_input():
    x, grid = torch.randn(1, 2, 3, 3, 3), torch.rand(1, 2, 2, 2, 3)
    code, r0 = sample(x, torch.rand(1, 0, 2, 2, 3), 0, 0, False)
    assert code == 0 and Tensor(r0[0]).torch().shape == (1, 2, 0, 2, 2)
    code, r0 = sample(x[:, :0], grid, 0, 0, False)
    assert code == 0 and Tensor(r0[0]).torch().shape == (1, 0, 2, 2, 2)
    poisoning_failure(sample(x, grid, 2, 0, False)[0], "aoti_torch_mps_grid_sampler_3d", "bicubic needs 4-D input")
    poisoning_failure(sample(x, grid, 0, 3, False)[0], "padding mode 3 is not valid")
    poisoning_failure(sample(x, grid.half(), 0, 0, False)[0], "expected input and grid to have same dtype")
    poisoning_failure(sample(x, grid[..., :2], 0, 0, False)[0], "expected grid to have size 3 in last dimension")
    poisoning_failure(sample(x, torch.rand(2, 2, 2, 2, 3), 0, 0, False)[0], "same batch size")
    poisoning_failure(sample(x[0], grid[0], 0, 0, False)[0], "expected 5D input")
    poisoning_failure(sample(x.long(), grid.long(), 0, 0, False)[0], "dtype int64 is not supported")
    poisoning_failure(sample(x[:, :, :0], grid, 0, 0, False)[0], "non-empty spatial dimensions")


def cdist(x1, x2, p, compute_mode=None):
    r0 = ffi.new("AtenTensorHandle*")
    mode = ffi.new("int64_t*", compute_mode) if compute_mode is not None else ffi.NULL
    a, b = as_device(x1), as_device(x2)
    return lib.aoti_torch_mps__cdist_forward(a.handle, b.handle, p, mode, r0), r0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cdist_matches_torch(dtype):
    generator = torch.Generator().manual_seed(1)
    x1 = torch.randn(2, 3, 7, 5, generator=generator).to(dtype)
    x2 = torch.randn(3, 6, 5, generator=generator).to(dtype)
    x2[0, 0] = x1[0, 0, 0]  # a zero distance (p 0 counts no column)
    tolerance = 2e-6 if dtype == torch.float32 else 2e-2
    for p in (0.0, 1.0, 2.0, math.inf, 0.5, 3.0):
        for a, b in ((x1, x2), (x1.transpose(-1, -2).contiguous().transpose(-1, -2), x2[:, ::2]),
                     (x1[0, 0], x2[1]), (x1[:, :1], x2)):
            for mode in (None, 2):
                code, r0 = cdist(a, b, p, mode)
                assert code == 0, etmetal_py.last_error()
                # compute mode 2: torch computes the differences directly, as etmetal always does
                expected = torch.ops.aten._cdist_forward(a.float(), b.float(), p, 2)
                got = Tensor(r0[0]).torch()
                assert got.dtype == dtype and got.shape == expected.shape
                torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance * (1 + 10 * (p == 0.5)))


def test_cdist_empty_and_bad_input():
    x1, x2 = torch.randn(4, 3), torch.randn(5, 3)
    code, r0 = cdist(x1[:, :0], x2[:, :0], 2.0)
    assert code == 0 and torch.equal(Tensor(r0[0]).torch(), torch.zeros(4, 5))
    code, r0 = cdist(x1[:0], x2, 2.0)
    assert code == 0 and Tensor(r0[0]).torch().shape == (0, 5)
    poisoning_failure(cdist(x1, x2[:, :2], 2.0)[0], "aoti_torch_mps__cdist_forward",
                      "X1 and X2 must have the same number of columns. X1: 3 X2: 2")
    poisoning_failure(cdist(x1, x2, -1.0)[0], "only supports non-negative p values")
    poisoning_failure(cdist(x1, x2, 2.0, 3)[0], "possible modes: None, 1, 2, but was: 3")
    poisoning_failure(cdist(x1[0], x2, 2.0)[0], "at least 2D tensors, X1 got: 1D")
    poisoning_failure(cdist(x1.long(), x2.long(), 2.0)[0], "only supports floating-point dtypes")
    poisoning_failure(cdist(x1, x2.half(), 2.0)[0], "must have the same dtype")
    poisoning_failure(cdist(torch.randn(2, 4, 3), torch.randn(3, 5, 3), 2.0)[0], "do not broadcast")


def pdist(x, p):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)
    return lib.aoti_torch_mps__pdist_forward(t.handle, p, r0), r0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pdist_matches_torch(dtype):
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(9, 6, generator=generator).to(dtype)
    x[4] = x[1]  # a zero distance (p 0 counts no column)
    tolerance = 2e-6 if dtype == torch.float32 else 2e-2
    for p in (0.0, 1.0, 2.0, math.inf, 0.5, 3.0):
        for view in (x, x.t().contiguous().t(), x[::2, 1:]):  # column-major, strided with an offset
            code, r0 = pdist(view, p)
            assert code == 0, etmetal_py.last_error()
            expected = torch.ops.aten._pdist_forward(view.float().contiguous(), p)
            got = Tensor(r0[0]).torch()
            assert got.dtype == dtype and got.shape == expected.shape
            torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance * (1 + 10 * (p == 0.5)))


def test_pdist_empty_and_bad_input():
    x = torch.randn(4, 3)
    for rows in (x[:1], x[:0]):  # no pair
        code, r0 = pdist(rows, 2.0)
        assert code == 0 and Tensor(r0[0]).torch().shape == (0,)
    code, r0 = pdist(x[:, :0], 2.0)
    assert code == 0 and torch.equal(Tensor(r0[0]).torch(), torch.zeros(6))
    message = poisoning_failure(pdist(x, -1.0)[0])
    assert message.endswith("aoti_torch_mps__pdist_forward: _pdist_forward: pdist only supports non-negative p "
                            "values"), message
    poisoning_failure(pdist(x[0], 2.0)[0], "pdist only supports 2D tensors, got: 1D")
    poisoning_failure(pdist(x.long(), 2.0)[0], "only supports floating-point dtypes")
    r0 = ffi.new("AtenTensorHandle*")
    poisoning_failure(lib.aoti_torch_mps__pdist_forward(ffi.NULL, 2.0, r0), "aoti_torch_mps__pdist_forward")
    t = as_device(x)
    poisoning_failure(lib.aoti_torch_mps__pdist_forward(t.handle, 2.0, ffi.NULL), "ret0")


def test_pdist_is_an_inductor_fallback_with_its_c_shim():
    from etmetal_py.aoti.aten_shims import aten_op_c_shims

    (declaration,) = aten_op_c_shims()[torch.ops.aten._pdist_forward.default]
    assert "aoti_torch_mps__pdist_forward(AtenTensorHandle self, double p, AtenTensorHandle* ret0)" in declaration


@pytest.mark.slow
def test_compiled_model_reaches_pdist(tmp_path):
    from ops_testing import compile_and_load

    class Spread(torch.nn.Module):
        def forward(self, points):
            return F.pdist(points), F.pdist(points * 2, p=1.0)

    model = Spread()
    runner = compile_and_load(model, (torch.randn(7, 3),), tmp_path, ["aoti_torch_mps__pdist_forward"])
    points = torch.randn(7, 3)
    for actual, expected in zip(runner(points), model(points)):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, math.inf, 0.5, 3.0], ids=str)
def test_cdist_and_pdist_blocks_match_float64(p):
    """Rows over several kernel blocks (32 x 32 outputs) and features over several staged chunks
    (32), both with partial ends, column-major offset views and a broadcast batch, against torch
    eager in float64."""
    generator = torch.Generator().manual_seed(3)
    x1 = torch.randn(2, 37, 70, generator=generator)
    big = torch.randn(100, 46, generator=generator)
    x2 = big.t()[1:, 30:]  # [45, 70], column-major, offset
    x2[44] = x1[1, 36]  # a zero distance in the last partial blocks
    code, r0 = cdist(x1, x2, p)
    assert code == 0, etmetal_py.last_error()
    expected = torch.ops.aten._cdist_forward(x1.double(), x2.double(), p, 2)
    got = Tensor(r0[0]).torch()
    assert got.shape == expected.shape and got[1, 36, 44] == 0
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    code, r0 = cdist(x1.bfloat16(), x2.bfloat16(), p)  # the same blocks in bfloat16
    assert code == 0, etmetal_py.last_error()
    expected = torch.ops.aten._cdist_forward(x1.bfloat16().double(), x2.bfloat16().double(), p, 2)
    torch.testing.assert_close(Tensor(r0[0]).torch().double(), expected, rtol=2e-2, atol=2e-2 * (1 + 10 * (p == 0.5)))

    rows = torch.randn(45, 150, generator=generator).t()[3:143:2]  # [70, 45], strides (2, 150)
    rows[69] = rows[5]
    code, r0 = pdist(rows, p)
    assert code == 0, etmetal_py.last_error()
    expected = torch.ops.aten._pdist_forward(rows.double().contiguous(), p)
    got = Tensor(r0[0]).torch()
    assert got.shape == expected.shape == (70 * 69 // 2,)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
