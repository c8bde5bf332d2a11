"""The models the AOTInductor tests compile, each with example inputs and a tolerance.

Each case is compiled once per test session (see conftest.py) and checked against torch
eager on CPU with fresh random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim


class PointwiseChain(nn.Module):
    """A chain of pointwise ops, with outputs of four dtypes (the bool and int ones computed
    exactly in any floating-point precision), and a tensor constant created in forward (export
    lifts it; Inductor serializes it under a name of its own)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        z = torch.sigmoid(x * 2.0 + y) * torch.tanh(y) - x.abs().sqrt()
        z = z * torch.tensor([0.5, 1.0, 1.5]).to(z.dtype).repeat(11)
        z = torch.where(z > 0, z.exp(), z * 0.5).clamp(-3.0, 3.0)
        return z, y > x, (x * 4).floor().to(torch.int32), (z + 1).to(torch.float16)


class Reductions(nn.Module):
    """Row and column reductions of a small matrix; whole-tensor reductions of 300k elements,
    which Inductor splits into two kernels."""

    def forward(self, x: torch.Tensor, long: torch.Tensor):
        return (x.sum(-1), x.amax(0), x.mean(), x.var(-1), x.argmin(-1),
                long.sum(), long.abs().amax(), (long * long).mean())


class Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, width: int = 96) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        with torch.no_grad():  # distinct weight and bias: a merged constant would show
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class ScaleShift(nn.Module):
    """Weights of one shape, a buffer, a 0-dim buffer, a weight that is a view into a larger
    storage and a transposed (non-contiguous) weight."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(width))
        self.shift = nn.Parameter(torch.randn(3, width)[1])
        self.mix = nn.Parameter(torch.randn(width, 4).t())
        self.register_buffer("offset", torch.randn(width))
        self.register_buffer("gain", torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale + self.shift) * self.gain * self.mix - self.offset


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 64)
        self.second = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(F.gelu(self.first(x)))


class EmbeddingArgmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(100, 16)

    def forward(self, tokens: torch.Tensor):
        vectors = self.embedding(tokens)
        return vectors.argmax(-1), vectors.sum(1)


class ChannelsLastInput(nn.Module):
    """Compiled for a channels-last input: the runner must hand it over with those strides."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return image * 2 + image.mean(1, keepdim=True)


class ConvBatchNorm(nn.Module):
    """Convolutions with batch norms and a strided 1x1 shortcut: a network Inductor's
    channels-last heuristic would convert (layout_optimization, which etmetal turns off)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(8, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.second = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32))
        self.shortcut = nn.Conv2d(8, 32, 1, 2)
        for norm in (self.first[1], self.second[1]):  # statistics other than the identity
            with torch.no_grad():
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.second(self.first(image)) + self.shortcut(image))


@dataclass
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]
    dtype: torch.dtype = torch.float32
    dynamic_shapes: Any = None
    compile_options: dict = field(default_factory=dict)
    atol: float = 1e-4
    rtol: float = 1e-4
    slow: bool = False


def _pair(shape: tuple, dtype: torch.dtype = torch.float32):
    return lambda g: (torch.randn(*shape, generator=g).to(dtype),
                      torch.randn(*shape, generator=g).to(dtype))


CASES: dict[str, Case] = {
    "pointwise": Case(PointwiseChain, _pair((8, 33))),
    "pointwise_fp16": Case(lambda: PointwiseChain().half(), _pair((8, 33), torch.float16),
                           dtype=torch.float16, atol=2e-2, rtol=2e-2),
    "pointwise_bf16": Case(lambda: PointwiseChain().bfloat16(), _pair((8, 33), torch.bfloat16),
                           dtype=torch.bfloat16, atol=8e-2, rtol=5e-2, slow=True),
    "reductions": Case(Reductions, lambda g: (torch.randn(16, 130, generator=g),
                                              torch.randn(300_000, generator=g)),
                       atol=1e-3, rtol=1e-4),
    "softmax_dynamic": Case(Softmax, lambda g: (torch.randn(4, 1000, generator=g),),
                            dynamic_shapes=({0: Dim("batch", min=1, max=64)},)),
    "layernorm": Case(LayerNorm, lambda g: (torch.randn(8, 96, generator=g),)),
    "layernorm_fp16": Case(lambda: LayerNorm().half(),
                           lambda g: (torch.randn(8, 96, generator=g).half(),),
                           dtype=torch.float16, atol=2e-2, rtol=2e-2, slow=True),
    "layernorm_bf16": Case(lambda: LayerNorm().bfloat16(),
                           lambda g: (torch.randn(8, 96, generator=g).bfloat16(),),
                           dtype=torch.bfloat16, atol=1e-1, rtol=5e-2),
    "weights_in_so": Case(ScaleShift, lambda g: (torch.randn(4, 64, generator=g),)),
    "weights_in_blob": Case(ScaleShift, lambda g: (torch.randn(4, 64, generator=g),),
                            compile_options={"external_weights": True}),
    "mlp_gelu": Case(MLP, lambda g: (torch.randn(8, 32, generator=g),), slow=True),
    "channels_last_input": Case(
        ChannelsLastInput,
        lambda g: (torch.randn(2, 3, 4, 5, generator=g).contiguous(
            memory_format=torch.channels_last),)),
    "conv_batchnorm": Case(ConvBatchNorm, lambda g: (torch.randn(1, 8, 16, 16, generator=g),),
                           atol=1e-4, rtol=1e-4, slow=True),
    "embedding_argmax": Case(EmbeddingArgmax,
                             lambda g: (torch.randint(0, 100, (3, 7), generator=g),)),
}
