"""aoti_torch_mps_histc against torch.histc (CPU eager): float32 exactly, float16 / bfloat16
against torch.histc of the float32 values (bins are computed in float32), strided views,
empty and 0-dim inputs, the data-range case, and bad input."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401


def call_histc(x, bins, low, high):
    r0 = ffi.new("AtenTensorHandle*")
    t = as_device(x)  # kept alive across the call
    code = lib.aoti_torch_mps_histc(t.handle, bins, low, high, r0)
    return code, r0


def histc(x, bins, low, high):
    code, r0 = call_histc(x, bins, low, high)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def expected_histc(x, bins, low, high):
    return torch.histc(x.float(), bins, low, high).to(x.dtype)


CASES = [  # (shape, bins, min, max)
    ((1000,), 10, -2.0, 2.0),
    ((37, 29), 7, -1.0, 0.5),
    ((3, 4, 5), 100, -3.0, 3.0),
    ((500,), 1, -1.0, 1.0),
    ((64, 16), 13, 0.0, 0.0),      # the data's own range
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, bins, low, high", CASES)
def test_histc_matches_torch(dtype, shape, bins, low, high):
    torch.manual_seed(bins)
    x = torch.randn(shape).to(dtype)
    out = histc(x, bins, low, high)
    assert out.dtype == dtype and out.shape == (bins,)
    assert torch.equal(out, expected_histc(x, bins, low, high))


def test_values_on_edges_nan_and_outside_the_range():
    # Edges of linspace(0, 1, 5): 0, .25, .5, .75, 1; 1.0 falls into the last bin.
    x = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 0.1, -0.01, 1.01, float("nan"), float("inf"),
                      -float("inf"), 0.999999])
    assert torch.equal(histc(x, 4, 0.0, 1.0), torch.histc(x, 4, 0.0, 1.0))
    ties = torch.full((50,), 3.0)  # data range is one point: widened to [2, 4]
    assert torch.equal(histc(ties, 4, 0.0, 0.0), torch.histc(ties, 4, 0.0, 0.0))


def test_strided_and_offset_views():
    torch.manual_seed(3)
    base = torch.randn(20, 30)
    for view in (base.t(), base[2:, 5::3], base[:, 7]):
        assert torch.equal(histc(view, 9, -1.5, 1.5), torch.histc(view, 9, -1.5, 1.5))


def test_empty_and_0_dim_inputs():
    empty = torch.empty(0, 5)
    assert torch.equal(histc(empty, 6, -1.0, 1.0), torch.histc(empty, 6, -1.0, 1.0))
    assert torch.equal(histc(empty, 6, 0.0, 0.0), torch.histc(empty, 6, 0.0, 0.0))
    scalar = torch.tensor(0.3)
    assert torch.equal(histc(scalar, 5, 0.0, 1.0), torch.histc(scalar, 5, 0.0, 1.0))
    assert torch.equal(histc(scalar, 5, 0.0, 0.0), torch.histc(scalar, 5, 0.0, 0.0))


def test_many_threadgroups_and_many_bins():
    # 70,000 elements span 9 threadgroups of the range pass and, with 100 bins, of the count
    # pass (8,192 elements each; 4,096 bins: 2 of 65,536); bins beyond threadgroup memory
    # (4,096) are counted in device memory instead.
    torch.manual_seed(11)
    x = torch.randn(70_000)
    for bins, low, high in ((100, 0.0, 0.0), (4096, -3.0, 3.0), (5000, -2.0, 2.0), (5000, 0.0, 0.0)):
        assert torch.equal(histc(x, bins, low, high), torch.histc(x, bins, low, high))
    view = torch.randn(400, 300)[:, 1::2].t()  # strided, 60,000 elements
    assert torch.equal(histc(view, 37, 0.0, 0.0), torch.histc(view, 37, 0.0, 0.0))
    half = x.half()
    assert torch.equal(histc(half, 64, 0.0, 0.0), expected_histc(half, 64, 0.0, 0.0))
    # The data's extremes and a NaN in a late threadgroup still decide the range.
    x[65_000], x[40_000] = 50.0, -60.0
    assert torch.equal(histc(x, 10, 0.0, 0.0), torch.histc(x, 10, 0.0, 0.0))
    x[69_999] = float("nan")
    code, r0 = call_histc(x, 10, 0.0, 0.0)
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match=r"histc: range of \[-?nan, -?nan\] is not finite"):
        etmetal_py.synchronize()


@pytest.mark.slow
def test_more_elements_than_the_threadgroups_take_at_their_least():
    # 2^25 + 12,345 elements: past 4,096 threadgroups of 8,192, so each thread takes more.
    torch.manual_seed(17)
    x = torch.randn((1 << 25) + 12_345)
    x[-1] = 9.0
    assert torch.equal(histc(x, 100, 0.0, 0.0), torch.histc(x, 100, 0.0, 0.0))
    assert torch.equal(histc(x, 4000, -4.0, 4.0), torch.histc(x, 4000, -4.0, 4.0))


def test_bad_input():
    x = torch.randn(10)
    poisoning_failure(call_histc(x, 0, 0.0, 1.0)[0], "aoti_torch_mps_histc", "bins must be > 0")
    poisoning_failure(call_histc(x, 4, 1.0, 0.0)[0], "max must be larger than min")
    poisoning_failure(call_histc(x, 4, 0.0, float("inf"))[0], "is not finite")
    poisoning_failure(call_histc(x.to(torch.int64), 4, 0.0, 1.0)[0], "input dtype int64 is not supported")
    poisoning_failure(lib.aoti_torch_mps_histc(ffi.NULL, 4, 0.0, 1.0, ffi.new("AtenTensorHandle*")),
                      "aoti_torch_mps_histc")
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(torch.tensor([1.0, float("inf")]), 4, 0.0, 0.0)
    code, r0 = call_histc(torch.tensor([1.0, float("inf")]), 4, 0.0, 0.0)
    assert code == 0  # data-dependent: known only once the kernels ran
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match=r"histc: range of \[1.0+, inf\] is not finite"):
        etmetal_py.synchronize()
