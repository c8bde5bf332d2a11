"""A model factory for the `etmetal compile` tests."""

import torch
from torch import nn


class ScaledSoftmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 100))

    def forward(self, x: torch.Tensor, tokens: torch.Tensor):
        return torch.softmax(x * self.scale, dim=-1), (tokens + 1).sum()


def build() -> nn.Module:
    torch.manual_seed(0)
    return ScaledSoftmax()


def not_a_model() -> int:
    return 3
