"""Compile errors a user can act on: the one op without a C shim is named, with what to do,
and the package is kept when asked; structseq outputs (torch.return_types) are refused early
with the fix."""

import os
import zipfile

import pytest
import torch

from etmetal_py.aoti import CompileError, ExportError, aoti_compile_and_package, export
from etmetal_py.aoti.compile import ops_needing_proxy_executor


@torch.library.custom_op("etmetal_test::twice_without_shim", mutates_args=())
def twice_without_shim(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice_without_shim.register_fake
def _(x):
    return torch.empty_like(x)


class FusedBlockWithOneUnshimmedOp(torch.nn.Module):
    def forward(self, x):
        # sin and add fuse with the custom op's input into one block; only the custom op
        # lacks a C shim.
        return twice_without_shim(torch.sin(x) + 1).cos()


@pytest.fixture(scope="module")
def unshimmed_program():
    return export(FusedBlockWithOneUnshimmedOp(), (torch.randn(4, 8),))


def test_only_the_op_without_a_c_shim_is_named_and_the_package_is_kept(unshimmed_program, tmp_path):
    package = tmp_path / "kept.pt2"
    with pytest.raises(CompileError) as failure:
        aoti_compile_and_package(unshimmed_program, package_path=str(package), keep_temps=True)
    message = str(failure.value)
    assert "op etmetal_test::twice_without_shim has no C shim for mps" in message
    assert "aten.sin" not in message and "aten.add" not in message
    assert "custom_ops_to_c_shims" in message and "etmetal_py.ops" in message
    assert f"kept at {package}" in message
    assert zipfile.is_zipfile(package)
    assert ops_needing_proxy_executor(str(package)) == ["etmetal_test::twice_without_shim"]


@pytest.mark.slow
def test_the_package_is_removed_unless_kept(unshimmed_program, tmp_path):
    package = tmp_path / "removed.pt2"
    with pytest.raises(CompileError, match="pass keep_temps=True"):
        aoti_compile_and_package(unshimmed_program, package_path=str(package))
    assert not os.path.exists(package)


class ReturnsTopk(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 2)


def test_structseq_outputs_get_a_clear_error():
    with pytest.raises(ExportError, match=r"torch\.return_types\.topk.*plain tuple"):
        export(ReturnsTopk(), (torch.randn(4, 8),))
    program = torch.export.export(ReturnsTopk(), (torch.randn(4, 8),))
    with pytest.raises(CompileError, match=r"torch\.return_types\.topk"):
        aoti_compile_and_package(program)


class ReturnsTopkFields(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.topk(x, 2)
        return values, indices


def test_the_suggested_tuple_exports():
    export(ReturnsTopkFields(), (torch.randn(4, 8),))
