"""The compatibility patches: scoped, restored on exit and on error, version-gated."""

import threading

import pytest
import torch
import torch.backends.mps
import torch._inductor.codecache as codecache
import torch._inductor.graph as inductor_graph
import torch._inductor.utils as inductor_utils
from torch import nn
from torch._inductor.codegen import cpp_wrapper_gpu
from torch._inductor.fx_passes import joint_graph, post_grad

from etmetal_py.aoti import _compat, export
from etmetal_py.aoti._compat import (UnsupportedTorchError, mps_compile_patches,
                                     resolve_gpu_cores)


def _patched_attributes():
    graph = inductor_graph.GraphLowering
    folder = joint_graph.UniformValueConstantFolder
    return {
        "utils.get_gpu_type": inductor_utils.get_gpu_type,
        "joint_graph.get_gpu_type": joint_graph.get_gpu_type,
        "post_grad.get_gpu_type": post_grad.get_gpu_type,
        "cpp_wrapper_gpu.get_gpu_type": cpp_wrapper_gpu.get_gpu_type,
        "joint_graph.lazy_init": joint_graph.lazy_init,
        "mps.get_core_count": torch.backends.mps.get_core_count,
        "graph.is_same_tensor": inductor_graph.is_same_tensor,
        "GraphLowering.get_original_value_of_constant":
            graph.__dict__["get_original_value_of_constant"],
        "GraphLowering.can_inline_constant": graph.__dict__["can_inline_constant"],
        "GraphLowering.get_attr": graph.__dict__["get_attr"],
        "AotCodeCompiler.compile": codecache.AotCodeCompiler.__dict__["compile"],
        "folder._deduce_value": folder.__dict__["_deduce_value"],
        "folder._add_peephole_patterns": folder.__dict__["_add_peephole_patterns"],
        "sdpa python kernels": dict(torch.ops.aten.scaled_dot_product_attention.default.py_kernels),
    }


def test_patches_apply_inside_and_are_restored_after():
    before = _patched_attributes()
    with mps_compile_patches(gpu_cores=7):
        inside = _patched_attributes()
        assert inductor_utils.get_gpu_type() == "mps"
        assert cpp_wrapper_gpu.get_gpu_type() == "mps"
        assert torch.backends.mps.get_core_count() == 7
        assert torch._C.DispatchKey.CompositeImplicitAutograd in \
            torch.ops.aten.scaled_dot_product_attention.default.py_kernels
    changed = [key for key in before if inside[key] is not before[key] and key != "sdpa python kernels"]
    assert len(changed) == len(before) - 1
    assert _patched_attributes() == before


def test_patches_are_restored_when_the_body_fails():
    before = _patched_attributes()
    with pytest.raises(RuntimeError, match="inside"):
        with mps_compile_patches():
            raise RuntimeError("inside")
    assert _patched_attributes() == before


def test_fake_constants_are_compared_by_identity_inside_the_patches():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = FakeTensorMode()
    first = FakeTensor(mode, torch.empty(4, device="meta"), torch.device("mps"))
    second = FakeTensor(mode, torch.empty(4, device="meta"), torch.device("mps"))
    with mps_compile_patches():
        assert inductor_graph.is_same_tensor(first, first)
        assert not inductor_graph.is_same_tensor(first, second)


def test_patched_sections_exclude_each_other():
    events = []
    entered = threading.Event()
    release = threading.Event()

    def hold():
        with mps_compile_patches():
            entered.set()
            events.append("first in")
            release.wait(10)
            events.append("first out")

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(10)

    def second():
        with mps_compile_patches():
            events.append("second in")

    waiter = threading.Thread(target=second)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()  # blocked while the first section holds the patches
    release.set()
    holder.join(10)
    waiter.join(10)
    assert events == ["first in", "first out", "second in"]


def test_other_torch_versions_are_refused(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.12.1")
    with pytest.raises(UnsupportedTorchError, match="2.13"):
        with mps_compile_patches():
            pass
    with pytest.raises(UnsupportedTorchError, match="2.12.1"):
        export(nn.ReLU(), (torch.randn(2),))
    monkeypatch.setattr(torch, "__version__", "2.13.4+cpu")
    _compat.check_torch_version()


def test_gpu_core_count_comes_from_argument_environment_or_default(monkeypatch):
    monkeypatch.delenv("ETMETAL_GPU_CORES", raising=False)
    assert resolve_gpu_cores(None) == 10
    monkeypatch.setenv("ETMETAL_GPU_CORES", "38")
    assert resolve_gpu_cores(None) == 38
    assert resolve_gpu_cores(16) == 16
    monkeypatch.setenv("ETMETAL_GPU_CORES", "many")
    with pytest.raises(ValueError, match="ETMETAL_GPU_CORES"):
        resolve_gpu_cores(None)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            resolve_gpu_cores(bad)


@pytest.mark.slow
def test_core_count_changes_the_split_reduction(tmp_path):
    import zipfile

    from etmetal_py.aoti import aoti_compile_and_package

    class Total(nn.Module):
        def forward(self, x):
            return x.sum()

    wrappers = []
    for cores in (8, 76):
        program = export(Total(), (torch.randn(400_000),))
        path = aoti_compile_and_package(program, package_path=str(tmp_path / f"c{cores}.pt2"),
                                        gpu_cores=cores)
        with zipfile.ZipFile(path) as archive:
            wrappers.append(next(archive.read(n) for n in archive.namelist()
                                 if n.endswith(".wrapper.cpp")))
    assert wrappers[0] != wrappers[1]
