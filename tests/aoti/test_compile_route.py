"""The compile route on a host without MPS: aten ops exported on CPU, moved to "mps" with fake
tensors and compiled by stock Inductor must never reach code that needs a real MPS device
(the failure "PyTorch is not linked with support for mps devices").

The default test compiles one model that uses many ops at once (one compile); the slow one
compiles each op on its own, with static and dynamic shapes, so a failure names its op."""

import pytest
import torch
import torch.nn.functional as F

from etmetal_py.aoti import CompileError, aoti_compile_and_package, export
from etmetal_py.aoti._compat import mps_available

pytestmark = pytest.mark.skipif(mps_available(), reason="the route without MPS")

S = torch.export.Dim.AUTO


def _float(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)))


# name -> (function of the inputs, inputs, dynamic dims per input or None)
OPS = {
    "index_select": (lambda x, i: torch.index_select(x, 0, i), (_float(6, 4), torch.tensor([0, 2, 5])), None),
    "index_tensor": (lambda x, i: x[i], (_float(6, 4), torch.tensor([1, 3])), None),
    "index_bool_mask_set": (lambda x: x.masked_fill(x > 0, 0.0), (_float(6, 4),), None),
    "index_put": (lambda x, i, v: x.index_put((i,), v), (_float(6, 4), torch.tensor([0, 2]), _float(2, 4)), None),
    "setitem": (lambda x, i: x.clone().index_fill_(0, i, 1.5), (_float(6, 4), torch.tensor([1, 4])), None),
    "gather": (lambda x, i: torch.gather(x, 1, i), (_float(6, 4), torch.zeros(6, 2, dtype=torch.long)), None),
    "scatter": (lambda x, i, v: x.scatter(1, i, v), (_float(6, 4), torch.zeros(6, 2, dtype=torch.long), _float(6, 2)), None),
    "scatter_add": (lambda x, i, v: x.scatter_add(1, i, v), (_float(6, 4), torch.zeros(6, 2, dtype=torch.long), _float(6, 2)), None),
    "embedding": (lambda w, i: F.embedding(i, w), (_float(10, 4), torch.tensor([[1, 2], [3, 9]])), None),
    "where": (lambda x, y: torch.where(x > y, x, y), (_float(6, 4), _float(6, 4)), None),
    "sdpa_bool_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                       (_float(1, 2, 5, 8), _float(1, 2, 5, 8), _float(1, 2, 5, 8),
                        torch.ones(5, 5, dtype=torch.bool).tril()), None),
    "sdpa_bool_mask_dynamic": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                               (_float(1, 2, 5, 8), _float(1, 2, 5, 8), _float(1, 2, 5, 8),
                                torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()),
                               ({2: S}, {2: S}, {2: S}, {2: S, 3: S})),
    "sdpa_causal_dynamic": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                            (_float(1, 2, 5, 8), _float(1, 2, 5, 8), _float(1, 2, 5, 8)),
                            ({2: S}, {2: S}, {2: S})),
    "arange_dynamic": (lambda x: x + torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1), (_float(6, 4),), ({0: S},)),
    "tril_mask_dynamic": (lambda x: x.masked_fill(torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1), -1.0),
                          (_float(6, 6),), ({0: S, 1: S},)),
    "full_like": (lambda x: torch.full_like(x, 3.0) * x, (_float(6, 4),), None),
    "zeros_dynamic": (lambda x: torch.zeros(x.shape[0], 3) + x[:, :3], (_float(6, 4),), ({0: S},)),
    "cumsum": (lambda x: torch.cumsum(x, 1), (_float(6, 4),), None),
    "sort": (lambda x: torch.sort(x, 1)[0], (_float(6, 4),), None),
    "topk_values": (lambda x: torch.topk(x, 2, 1).values, (_float(6, 4),), None),
    "argmax": (lambda x: torch.argmax(x, 1), (_float(6, 4),), None),
    "softmax_dynamic": (lambda x: torch.softmax(x, -1), (_float(6, 4),), ({0: S},)),
    "layer_norm": (lambda x: F.layer_norm(x, (4,)), (_float(6, 4),), None),
    "group_norm": (lambda x: F.group_norm(x, 2), (_float(2, 4, 5),), None),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), (_float(1, 3, 8, 8), _float(4, 3, 3, 3)), None),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), (_float(1, 3, 8, 8),), None),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), (_float(1, 3, 8, 8),), None),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1), (_float(1, 3, 8, 8),), None),
    "interpolate_nearest": (lambda x: F.interpolate(x, scale_factor=2.0), (_float(1, 3, 4, 4),), None),
    "interpolate_bilinear": (lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear"), (_float(1, 3, 4, 4),), None),
    "pad": (lambda x: F.pad(x, (1, 2)), (_float(6, 4),), None),
    "cat_stack": (lambda x, y: torch.cat([x, torch.stack([y, y]).sum(0)], 1), (_float(6, 4), _float(6, 4)), None),
    "flip_roll": (lambda x: torch.flip(x, [0]) + torch.roll(x, 1, 1), (_float(6, 4),), None),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, dim=0), (_float(6, 4),), None),
    "bmm_baddbmm": (lambda a, b: torch.baddbmm(a @ b, a, b), (_float(2, 4, 4), _float(2, 4, 4)), None),
    "linear": (lambda x, w, b: F.linear(x, w, b), (_float(6, 4), _float(3, 4), _float(3)), None),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (_float(2, 3, 4), _float(2, 4, 5)), None),
    "clamp_pow": (lambda x: x.clamp(-0.5, 0.5).pow(2) + x.abs().sqrt(), (_float(6, 4),), None),
    "rms_norm": (lambda x: F.rms_norm(x, (4,)), (_float(6, 4),), None),
    "one_hot_like": (lambda i: (i.unsqueeze(-1) == torch.arange(5)).float(), (torch.tensor([0, 3, 4]),), None),
    "masked_mean": (lambda x, m: (x * m).sum(1) / m.sum(1).clamp(min=1), (_float(6, 4), torch.ones(6, 4)), None),
    "expand_dynamic": (lambda x: x.unsqueeze(0).expand(3, -1, -1).reshape(-1, x.shape[1]), (_float(6, 4),), ({0: S},)),
    "type_conversions": (lambda x: x.to(torch.float16).to(torch.int32).to(torch.float32), (_float(6, 4),), None),
}


class _Op(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *inputs):
        return self.function(*inputs)


class _AllOps(torch.nn.Module):
    """Every static-shape op of OPS in one graph (one compile)."""

    def __init__(self, names):
        super().__init__()
        self.names = names

    def forward(self, *inputs):
        outputs, position = [], 0
        for name in self.names:
            function, example, _ = OPS[name]
            outputs.append(function(*inputs[position:position + len(example)]))
            position += len(example)
        return tuple(outputs)


def _compile(model, inputs, dynamic_shapes, tmp_path, name):
    program = export(model, inputs, dynamic_shapes=dynamic_shapes)
    return aoti_compile_and_package(program, package_path=str(tmp_path / f"{name}.pt2"))


def _no_mps_reached(error: Exception) -> None:
    text = f"{error}\n{error.__cause__}"
    assert "not linked with support for mps" not in text, text[-3000:]


def test_many_ops_compile_in_one_model(tmp_path):
    names = [name for name, (_, _, dynamic) in OPS.items() if dynamic is None]
    inputs = tuple(value for name in names for value in OPS[name][1])
    try:
        _compile(_AllOps(names), inputs, None, tmp_path, "all_ops")
    except CompileError as error:
        _no_mps_reached(error)
        raise


# Each dynamic case is its own compile (about a minute on two cores): slow suite.
@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, (_, _, dynamic) in OPS.items() if dynamic is not None])
def test_dynamic_shape_ops_compile(name, tmp_path):
    function, inputs, dynamic = OPS[name]
    try:
        _compile(_Op(function), inputs, {"inputs": dynamic}, tmp_path, name)
    except CompileError as error:
        _no_mps_reached(error)
        raise


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, (_, _, dynamic) in OPS.items() if dynamic is None])
def test_each_op_compiles(name, tmp_path):
    function, inputs, _ = OPS[name]
    try:
        _compile(_Op(function), inputs, None, tmp_path, name)
    except CompileError as error:
        _no_mps_reached(error)
        raise
