"""Export for "mps" and AOT compilation: what the program and the package contain."""

import sys
import types
import zipfile

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchgen.aoti.fallback_ops import inductor_fallback_ops

import etmetal_py
from aoti_testing import assert_outputs_close, load_runner, require_shader_compiler
from etmetal_py.aoti import CompileError, ExportError, aoti_compile_and_package, export
from etmetal_py.aoti._symbols import undefined_symbols
from etmetal_py.aoti.aten_shims import _torch_mps_shims, aten_op_c_shims
from etmetal_py.aoti.compile import build_inductor_configs, describe_compile_failure
from etmetal_py.aoti.export import real_constants_of


class KitchenSink(nn.Module):
    """What tracing with fake "mps" tensors used to fail on: slicing, memory formats, SDPA
    (grouped-query, boolean mask), constructors in forward, 0-dim and tiny buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_free_scale = nn.Parameter(torch.randn(16))
        self.register_buffer("temperature", torch.tensor(0.5))
        self.register_buffer("tiny", torch.tensor([1.0, -2.0, 3.0]))

    def forward(self, x, q, k, v, mask):
        part = x[:, 2:18] * self.conv_free_scale
        image = part.reshape(1, 4, 2, 8).contiguous(memory_format=torch.channels_last)
        padding = torch.zeros(image.shape[0], 4, 2, 8) + self.tiny.sum() + torch.arange(8) * 0
        attention = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return (image + padding) * self.temperature, attention


def seeded_kitchen_sink() -> KitchenSink:
    torch.manual_seed(0)
    return KitchenSink()


def kitchen_sink_inputs():
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(4, 20, generator=generator), torch.randn(1, 4, 8, 16, generator=generator),
            torch.randn(1, 2, 8, 16, generator=generator),
            torch.randn(1, 2, 8, 16, generator=generator),
            torch.rand(8, 8, generator=generator) > 0.3)


def _package_texts(path):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        wrapper = next(archive.read(n).decode() for n in names if n.endswith(".wrapper.cpp"))
        return names, wrapper


def test_export_moves_the_program_to_mps_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(8), nn.ReLU())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    program = export(model, (torch.randn(2, 8),))
    for name, value in program.state_dict.items():
        assert value.device.type == "mps", name
        assert not value.requires_grad, name
    real = real_constants_of(program)
    assert set(real) == set(before)
    for name, value in before.items():
        assert torch.equal(real[name], value)
        assert model.state_dict()[name].device.type == "cpu"
        assert torch.equal(model.state_dict()[name], value)
    assert all(p.requires_grad for p in model.parameters())
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    assert all(n.meta["val"].device.type == "mps" for n in placeholders)


def test_export_accepts_numpy_example_inputs():
    program = export(nn.ReLU(), (torch.randn(3, 4).numpy(),))
    (user_input,) = [n for n in program.graph.nodes if n.op == "placeholder"]
    assert user_input.meta["val"].device.type == "mps"
    assert tuple(user_input.meta["val"].shape) == (3, 4)


def test_export_rejects_models_without_real_weights():
    with pytest.raises(TypeError):
        export(lambda x: x, (torch.randn(2),))
    with torch.device("meta"):
        model = nn.Linear(2, 2)
    with pytest.raises(ExportError, match="meta"):
        export(model, (torch.randn(2),))


def test_export_reports_what_torch_export_rejects():
    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ExportError, match="torch.export failed on CPU"):
        export(DataDependent(), (torch.randn(3),))


def test_kitchen_sink_compiles_with_only_runtime_symbols_left_open(tmp_path):
    program = export(seeded_kitchen_sink(), kitchen_sink_inputs())
    path = aoti_compile_and_package(program, package_path=str(tmp_path / "sink.pt2"))
    names, wrapper = _package_texts(path)
    # SDPA takes the math-for-mps route that torch takes on macOS.
    assert "aoti_torch_mps__scaled_dot_product_attention_math_for_mps" in wrapper
    library = next(n for n in names if n.endswith(".so"))
    with zipfile.ZipFile(path) as archive:
        archive.extract(library, tmp_path)
    strong, _ = undefined_symbols(str(tmp_path / library))
    # link_libtorch=False: nothing from torch, c10 or Python stays open.
    foreign = {s for s in strong if not s.startswith("aoti_torch_")}
    assert not [s for s in foreign if any(m in s for m in ("c10", "5torch", "N2at", "Py"))]
    assert "aoti_torch_mps_create_shader_library" in strong
    assert not any("proxy_executor" in s for s in strong)

    require_shader_compiler()
    inputs = kitchen_sink_inputs()
    with torch.no_grad():
        expected = seeded_kitchen_sink()(*inputs)
    with load_runner(path) as runner:
        assert_outputs_close(runner(*inputs), expected, 1e-4, 1e-4)


def test_a_cpu_program_is_moved_by_the_compiler_and_left_unchanged(tmp_path):
    program = torch.export.export(nn.Sequential(nn.LayerNorm(4)), (torch.randn(2, 4),))
    path = aoti_compile_and_package(program, package_path=str(tmp_path / "cpu_program.pt2"))
    assert zipfile.is_zipfile(path)
    assert all(v.device.type == "cpu" for v in program.state_dict.values())
    assert all(n.meta["val"].device.type == "cpu"
               for n in program.graph.nodes if n.op == "placeholder")


def test_ops_without_a_c_shim_are_refused_by_name(tmp_path):
    library = torch.library.Library("etmetal_test_export", "FRAGMENT")
    library.define("twice(Tensor x) -> Tensor")
    library.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
    library.impl("twice", lambda x: torch.empty_like(x), "Meta")

    class UsesCustomOp(nn.Module):
        def forward(self, x):
            return torch.ops.etmetal_test_export.twice(x) + 1

    package = tmp_path / "custom.pt2"
    with pytest.raises(CompileError, match=r"op etmetal_test_export::twice has no C shim"):
        aoti_compile_and_package(export(UsesCustomOp(), (torch.randn(3),)),
                                 package_path=str(package))
    assert not package.exists()


@pytest.mark.parametrize("configs, message", [
    ({"aot_inductor.link_libtorch": True}, "link_libtorch"),
    ({"aot_inductor.package_constants_on_disk_format": "pickle_weights"}, "pickle_weights"),
    ({"aot_inductor.package_constants_in_so": False}, "binary_blob"),
])
def test_unsupported_configs_are_refused(configs, message):
    with pytest.raises(ValueError, match=message):
        build_inductor_configs(configs, external_weights=False)


def test_bad_package_paths_are_refused(tmp_path):
    program = export(nn.ReLU(), (torch.randn(2),))
    with pytest.raises(ValueError, match=r"\.pt2"):
        aoti_compile_and_package(program, package_path=str(tmp_path / "model.zip"))
    with pytest.raises(ValueError, match="does not exist"):
        aoti_compile_and_package(program, package_path=str(tmp_path / "missing" / "m.pt2"))
    with pytest.raises(TypeError):
        aoti_compile_and_package(nn.ReLU())
    if sys.platform != "darwin":
        with pytest.raises(ValueError, match="only supported on macOS"):
            aoti_compile_and_package(program, codesign_identity="Developer ID")


def test_external_weights_and_link_settings_reach_inductor():
    configs = build_inductor_configs({"max_autotune": False}, external_weights=True)
    assert configs["aot_inductor.link_libtorch"] is False
    assert configs["aot_inductor.package_constants_in_so"] is False
    assert configs["aot_inductor.package_constants_on_disk_format"] == "binary_blob"
    assert configs["max_autotune"] is False


def test_layout_optimization_is_off_unless_asked_for():
    assert build_inductor_configs(None, external_weights=False)["layout_optimization"] is False
    configs = build_inductor_configs({"layout_optimization": True}, external_weights=False)
    assert configs["layout_optimization"] is True


def test_custom_op_c_shims_come_from_etmetal_ops(monkeypatch):
    op = torch.ops.aten.relu.default
    declaration = ["AOTITorchError aoti_torch_mps_example(AtenTensorHandle self)"]
    fake_ops = types.ModuleType("etmetal_py.ops")
    fake_ops.custom_ops_to_c_shims = lambda: {op: declaration}
    monkeypatch.setitem(sys.modules, "etmetal_py.ops", fake_ops)
    configs = build_inductor_configs(None, external_weights=False)
    assert configs["aot_inductor.custom_ops_to_c_shims"] == {op: declaration, **aten_op_c_shims()}
    fake_ops.custom_ops_to_c_shims = {op: declaration}
    assert build_inductor_configs(None, False)["aot_inductor.custom_ops_to_c_shims"] == {
        op: declaration, **aten_op_c_shims()}
    fake_ops.custom_ops_to_c_shims = ["not", "a", "dict"]
    with pytest.raises(CompileError, match="must be a dict"):
        build_inductor_configs(None, False)


def test_without_etmetal_ops_only_the_aten_shims_are_added(monkeypatch):
    shims = aten_op_c_shims()  # libetmetal's declarations of aten ops torch has no shim for
    assert {"aten._fft_c2r.default", "aten.linalg_solve_triangular.default",
            "aten._pdist_forward.default"} <= {str(op) for op in shims}
    torch_mps_shims = _torch_mps_shims()
    for op, (declaration,) in shims.items():  # each one torch's fallback-op list or mps shims lack
        name = op.name().removeprefix("aten::")
        assert str(op) == f"aten.{name}.default"
        assert str(op) not in inductor_fallback_ops or f" aoti_torch_mps_{name}(" not in torch_mps_shims
        assert f" aoti_torch_mps_{name}(" in declaration
    monkeypatch.setitem(sys.modules, "etmetal_py.ops", None)  # import fails: module absent
    assert build_inductor_configs(None, False)["aot_inductor.custom_ops_to_c_shims"] == shims


def test_compile_failures_name_the_op_being_compiled():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.special_bessel_j0.default, (x,))

    def lower(node):
        raise NotImplementedError("no lowering for this device\n  long argument dump")

    class WrappedLikeInductor(RuntimeError):
        def __init__(self, inner):
            super().__init__(str(inner))
            self.inner_exception = inner

    try:
        try:
            lower(node)
        except NotImplementedError as inner:
            raise WrappedLikeInductor(inner) from inner
    except WrappedLikeInductor as failure:
        message = describe_compile_failure(failure)
    assert message.startswith("while compiling op aten.special_bessel_j0.default")
    assert "NotImplementedError: no lowering for this device" in message


def test_package_level_names_are_the_aoti_functions():
    from etmetal_py import aoti

    assert etmetal_py.export is aoti.export
    assert etmetal_py.aoti_compile_and_package is aoti.aoti_compile_and_package
    assert etmetal_py.aoti_load_package is aoti.aoti_load_package
