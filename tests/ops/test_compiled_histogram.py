"""torch.histogram in a compiled model: the Meta kernels etmetal_py registers while a program
compiles (torch 2.13 has none for the histogram ops) against the shapes and dtypes of torch's CPU
kernels, then (slow, one AOTI compile each) a model using torch.histogram run through libetmetal
against torch eager, and torch.histogramdd's compile failing with an error naming the op that has
no C shim. The shims themselves are tested in test_histogram.py."""

import pytest
import torch

import etmetal_py
from etmetal_py.aoti import CompileError
from etmetal_py.aoti.aten_shims import aten_ops_with_c_shims
from ops_testing import compile_and_load

HISTOGRAM = torch.ops.aten.histogram.bin_ct
FROM_BIN_CTS = torch.ops.aten._histogramdd_from_bin_cts.default
BIN_EDGES = torch.ops.aten._histogramdd_bin_edges.default


def meta_and_cpu_results(op, x, *args, **kwargs):
    with aten_ops_with_c_shims():
        meta = op(x.to("meta"), *args, **kwargs)
    return meta, op(x, *args, **kwargs)


def assert_same_layout(meta, cpu):
    if isinstance(cpu, torch.Tensor):
        assert meta.device.type == "meta"
        assert (meta.shape, meta.dtype) == (cpu.shape, cpu.dtype)
        return
    assert len(meta) == len(cpu)
    for m, c in zip(meta, cpu):
        assert_same_layout(m, c)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_meta_kernels_shape_outputs_as_the_cpu_kernels(dtype):
    x = torch.randn(40, 3, dtype=dtype)
    weight = torch.rand(40, dtype=dtype)
    assert_same_layout(*meta_and_cpu_results(HISTOGRAM, x[:, 0], 8))
    assert_same_layout(*meta_and_cpu_results(HISTOGRAM, x, 3, range=[-1.0, 1.0], density=True))
    assert_same_layout(*meta_and_cpu_results(FROM_BIN_CTS, x, [2, 5, 1], weight=weight))
    assert_same_layout(*meta_and_cpu_results(BIN_EDGES, x, [2, 5, 1], range=[0, 1, 0, 1, 0, 1]))


@pytest.mark.parametrize("op, x, bins", [
    (HISTOGRAM, torch.arange(6), 3),  # integer input
    (HISTOGRAM, torch.randn(6), 0),
    (FROM_BIN_CTS, torch.randn(6, 2), [3, 0]),
    (FROM_BIN_CTS, torch.randn(6, 3), [3, 2]),  # a bin count per innermost coordinate
    (BIN_EDGES, torch.randn(6), [3]),  # histogramdd needs samples of coordinates
], ids=["integer", "zero-bins", "dd-zero-bins", "dd-bins-length", "dd-1d"])
def test_meta_kernels_refuse_what_the_cpu_kernels_refuse(op, x, bins):
    with pytest.raises((RuntimeError, NotImplementedError)):
        op(x, bins)
    with aten_ops_with_c_shims(), pytest.raises(RuntimeError):
        op(x.to("meta"), bins)


def test_meta_kernels_exist_only_while_compiling():
    x = torch.empty(10, device="meta")
    with aten_ops_with_c_shims():
        HISTOGRAM(x, 4)
    with pytest.raises(NotImplementedError, match="histogram.bin_ct"):
        HISTOGRAM(x, 4)


class HistogramModel(torch.nn.Module):
    def forward(self, x):
        counts, edges = torch.histogram(x, bins=8)
        scaled_counts, scaled_edges = torch.histogram(x * 2, bins=5, range=(-1.0, 1.0))
        return counts, edges, scaled_counts, scaled_edges


@pytest.mark.slow
def test_compiled_model_reaches_histogram_shim(tmp_path):
    model = HistogramModel()
    runner = compile_and_load(model, (torch.randn(200),), tmp_path,
                              ["aoti_torch_mps_histogram_bin_ct"])
    for seed in (1, 2):
        x = torch.randn(200, generator=torch.Generator().manual_seed(seed))
        got = runner(x)
        want = model(x)
        assert len(got) == len(want) == 4
        for counts in (0, 2):
            assert got[counts].dtype == want[counts].dtype
            assert torch.equal(got[counts], want[counts])
        for edges in (1, 3):
            assert got[edges].dtype == want[edges].dtype and got[edges].shape == want[edges].shape
            torch.testing.assert_close(got[edges], want[edges], rtol=0, atol=1e-6)


class HistogramddModel(torch.nn.Module):
    def forward(self, x):
        counts, edges = torch.histogramdd(x, bins=[3, 4])
        return counts, edges[0], edges[1]


@pytest.mark.slow
def test_compiled_histogramdd_names_the_op_without_a_shim(tmp_path):
    ep = etmetal_py.export(HistogramddModel(), (torch.randn(50, 2),))
    with pytest.raises(CompileError, match="aten::_histogramdd_bin_edges has no C shim"):
        etmetal_py.aoti_compile_and_package(ep, str(tmp_path / "model.pt2"))
    assert not (tmp_path / "model.pt2").exists()
