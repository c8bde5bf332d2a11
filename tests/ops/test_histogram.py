"""aoti_torch_mps_histogram_bin_ct and aoti_torch_mps__histogramdd_from_bin_cts against torch's
CPU eager ops (aten histogram.bin_ct, _histogramdd_from_bin_cts): counts exactly, weighted and
density results within float32 rounding (atomic adds sum in any order), bin edges within
1 ulp-scale of torch's linspace; given and data ranges, strided views, empty and 0-dim
inputs, and bad input poisoning the stream."""

import pytest
import torch

import etmetal_py
from etmetal_py import Tensor, ffi, lib
from ops_testing import as_device, no_leaks_in_module, poisoning_failure  # noqa: F401


def optional_range(values, keep):
    if values is None:
        return ffi.NULL, 0
    array = ffi.new("double[]", list(values))
    pointer = ffi.new("double*[1]", [array])
    keep.extend((array, pointer))
    return ffi.cast("const double**", pointer), len(values)


def optional_weight(weight, keep):
    if weight is None:
        return ffi.NULL
    device = as_device(weight)
    keep.append(device)
    return ffi.new("AtenTensorHandle*", device.handle)


def call_histogram(x, bins, range_=None, weight=None, density=False):
    keep = [as_device(x)]
    range_ptr, range_len = optional_range(range_, keep)
    r0, r1 = ffi.new("AtenTensorHandle*"), ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps_histogram_bin_ct(keep[0].handle, bins, range_ptr, range_len,
                                               optional_weight(weight, keep), int(density), r0, r1)
    return code, r0, r1


def histogram(x, bins, range_=None, weight=None, density=False):
    code, r0, r1 = call_histogram(x, bins, range_, weight, density)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch(), Tensor(r1[0]).torch()


def call_histogramdd(x, bins, range_=None, weight=None, density=False):
    keep = [as_device(x)]
    range_ptr, range_len = optional_range(range_, keep)
    counts = ffi.new("int64_t[]", list(bins) or [0])
    r0 = ffi.new("AtenTensorHandle*")
    code = lib.aoti_torch_mps__histogramdd_from_bin_cts(keep[0].handle, counts, len(bins), range_ptr,
                                                        range_len, optional_weight(weight, keep),
                                                        int(density), r0)
    return code, r0


def histogramdd(x, bins, range_=None, weight=None, density=False):
    code, r0 = call_histogramdd(x, bins, range_, weight, density)
    assert code == 0, etmetal_py.last_error()
    return Tensor(r0[0]).torch()


def expected_histogram(x, bins, range_=None, weight=None, density=False):
    return torch.ops.aten.histogram.bin_ct(x, bins, range=range_, weight=weight, density=density)


def expected_histogramdd(x, bins, range_=None, weight=None, density=False):
    return torch.ops.aten._histogramdd_from_bin_cts(x, bins, range=range_, weight=weight, density=density)


def assert_edges(actual, expected):
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=2e-7, atol=2e-7)


CASES = [  # (shape, bins, range)
    ((1000,), 10, (-2.0, 2.0)),
    ((37, 29), 7, (-1.0, 0.5)),
    ((3, 4, 5), 100, None),
    ((500,), 1, None),
    ((64, 16), 13, (0.25, 0.25)),  # a one-point range, widened by 0.5
]


@pytest.mark.parametrize("shape, bins, range_", CASES)
def test_histogram_counts_match_torch(shape, bins, range_):
    torch.manual_seed(bins)
    x = torch.randn(shape)
    hist, edges = histogram(x, bins, range_)
    want_hist, want_edges = expected_histogram(x, bins, range_)
    assert hist.dtype == torch.float32 and torch.equal(hist, want_hist)
    assert_edges(edges, want_edges)


@pytest.mark.parametrize("range_", [None, (-1.0, 1.5)])
def test_histogram_weight_and_density(range_):
    torch.manual_seed(5)
    x, w = torch.randn(40, 25), torch.rand(1000)
    for weight, density in ((w, False), (None, True), (w, True)):
        hist, edges = histogram(x, 12, range_, weight, density)
        want_hist, want_edges = expected_histogram(x, 12, range_, weight, density)
        torch.testing.assert_close(hist, want_hist, rtol=1e-5, atol=1e-6)
        assert_edges(edges, want_edges)


def test_histogram_edges_nan_and_strided_views():
    x = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 0.1, -0.01, 1.01, float("nan"), float("inf"),
                      -float("inf"), 0.999999])
    assert torch.equal(histogram(x, 4, (0.0, 1.0))[0], expected_histogram(x, 4, [0.0, 1.0])[0])
    torch.manual_seed(3)
    base = torch.randn(20, 30)
    weight_base = torch.rand(30, 20)
    for view, weight in ((base.t(), weight_base), (base[2:, 5::3], weight_base.t()[2:, 5::3]),
                         (base[:, 7], weight_base[7])):
        hist, edges = histogram(view, 9, None, weight)
        want_hist, want_edges = expected_histogram(view, 9, None, weight.reshape(view.shape))
        torch.testing.assert_close(hist, want_hist, rtol=1e-5, atol=1e-6)
        assert_edges(edges, want_edges)


def test_histogram_empty_and_0_dim_inputs():
    for x, range_, density in ((torch.empty(0, 5), None, False), (torch.empty(0), (-1.0, 1.0), False),
                               (torch.empty(0), None, True), (torch.tensor(0.3), None, False),
                               (torch.tensor(0.3), (0.0, 1.0), True)):
        hist, edges = histogram(x, 6, range_, None, density)
        want_hist, want_edges = expected_histogram(x, 6, range_, None, density)
        torch.testing.assert_close(hist, want_hist, equal_nan=True)
        assert_edges(edges, want_edges)


@pytest.mark.parametrize("shape, bins, range_", [
    ((200, 2), [4, 5], None),
    ((6, 7, 3), [3, 2, 5], [-1.0, 1.0, -2.0, 0.5, 0.0, 0.0]),
    ((300, 1), [8], [-1.0, 1.0]),
])
def test_histogramdd_matches_torch(shape, bins, range_):
    torch.manual_seed(len(bins))
    x = torch.randn(shape)
    hist = histogramdd(x, bins, range_)
    assert hist.dtype == torch.float32 and hist.shape == tuple(bins)
    assert torch.equal(hist, expected_histogramdd(x, bins, range_))
    weight = torch.rand(shape[:-1])
    torch.testing.assert_close(histogramdd(x, bins, range_, weight, True),
                               expected_histogramdd(x, bins, range_, weight, True), rtol=1e-5, atol=1e-6)


def test_histogramdd_strided_empty_and_no_coordinates():
    torch.manual_seed(11)
    base = torch.randn(3, 50, 4)
    view = base.permute(1, 2, 0)[::2, 1:]  # [25, 3, 3], last dimension strided
    weight = torch.rand(3, 25).t()
    torch.testing.assert_close(histogramdd(view, [4, 3, 2], None, weight),
                               expected_histogramdd(view, [4, 3, 2], None, weight), rtol=1e-5, atol=1e-6)
    empty = torch.empty(0, 2)
    assert torch.equal(histogramdd(empty, [3, 2]), expected_histogramdd(empty, [3, 2]))
    no_coordinates = torch.empty(5, 0)
    assert torch.equal(histogramdd(no_coordinates, []), expected_histogramdd(no_coordinates, []))


def test_data_range_over_many_threadgroups():
    # 20,000 points span 3 threadgroups of the range and count passes (8,192 points each); the
    # extremes and a NaN sit in the last one.
    torch.manual_seed(13)
    x = torch.randn(20_000)
    x[19_000], x[17_500] = 40.0, -30.0
    hist, edges = histogram(x, 50)
    want_hist, want_edges = expected_histogram(x, 50)
    assert torch.equal(hist, want_hist)
    # The range is the data's exactly (inner edges of so wide a range differ from torch's
    # linspace by a few ulp, as with a given range: not this test's subject).
    assert edges[0] == want_edges[0] == -30.0 and edges[-1] == want_edges[-1] == 40.0
    points = torch.randn(3, 9_000, 2).permute(1, 0, 2)  # [9000, 3, 2], strided
    points[8_999, 2, 1] = 7.0
    assert torch.equal(histogramdd(points, [5, 6]), expected_histogramdd(points, [5, 6]))
    # More bins than a threadgroup counts in its memory (2,048): counted in device memory.
    assert torch.equal(histogramdd(points, [60, 50]), expected_histogramdd(points, [60, 50]))
    # density over 10,000 bins: the total is summed over 2 threadgroups, each dividing its share.
    weight = torch.rand(9_000, 3)
    torch.testing.assert_close(histogramdd(points, [100, 100], None, weight, True),
                               expected_histogramdd(points, [100, 100], None, weight, True), rtol=1e-5, atol=1e-6)
    points[8_500, 1, 0] = float("nan")
    code, r0 = call_histogramdd(points, [5, 6])
    assert code == 0
    Tensor(r0[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match=r"dimension 0's range \[nan, nan\] is not finite"):
        etmetal_py.synchronize()


def test_bad_input():
    x = torch.randn(10)
    poisoning_failure(call_histogram(x, 0)[0], "aoti_torch_mps_histogram_bin_ct", "bins must be > 0")
    poisoning_failure(call_histogram(x, 4, (1.0, 0.0))[0], "min should not exceed max")
    poisoning_failure(call_histogram(x, 4, (0.0, float("inf")))[0], "is not finite")
    poisoning_failure(call_histogram(x, 4, (0.0, 1.0, 2.0))[0], "range should have 2 elements")
    poisoning_failure(call_histogram(x.double(), 4)[0], "input dtype float64 is not supported")
    poisoning_failure(call_histogram(x, 4, None, torch.ones(9))[0], "as many elements as the input")
    poisoning_failure(call_histogramdd(x, [4])[0], "at least 2 dimensions")
    poisoning_failure(call_histogramdd(x.reshape(5, 2), [4])[0], "expected 2 bin counts")
    poisoning_failure(call_histogramdd(x.reshape(5, 2), [4, 4], None, torch.ones(4))[0],
                      "same shape as the input tensor excluding its innermost dimension")
    code, r0, r1 = call_histogram(torch.tensor([1.0, float("nan")]), 4)
    assert code == 0  # data-dependent: known only once the kernels ran
    Tensor(r0[0]).delete()
    Tensor(r1[0]).delete()
    with pytest.raises(etmetal_py.EtmetalError, match=r"histogram: dimension 0's range \[nan, nan\] is not finite"):
        etmetal_py.synchronize()
    assert torch.equal(histogram(x, 3, (0.0, 1.0))[0], expected_histogram(x, 3, [0.0, 1.0])[0])
