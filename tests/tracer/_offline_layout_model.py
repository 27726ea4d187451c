"""A model for the offline layout tests: its values are slices, expands, strided steps and odd strides,
and it calls its own autograd.Function (imported by the validating process by module name)."""
from __future__ import annotations

import torch
from torch import nn


class Cube(torch.autograd.Function):
    """A model's own Function: replayed offline only from an imported module or an allowlist."""

    @staticmethod
    def forward(ctx, x):
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        return g


class Views(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.row = nn.Parameter(torch.randn(1, 16))

    def forward(self, x):
        q, k, v = self.qkv(x).split(16, dim=-1)  # non-dense views of one buffer
        col = q[:, :1].to(torch.float32)  # a (n, 1) view: its size-1 dim keeps the parent's stride
        att = torch.matmul(k[:1], col)  # (1, 16) @ (16, 1): BLAS reads the odd stride as a transpose
        steps = nn.functional.silu(v[:, ::2])  # a strided step
        wide = self.row.expand(x.shape[0], 16) * q  # an expand (stride 0)
        idx = torch.tensor([0, 2])
        n = torch.tensor(3)
        pad = torch.zeros((2, n), dtype=float)  # a size tensor inside a tuple, a Python type as dtype
        return Cube.apply(steps).sum() + att.sum() + wide[(slice(None), idx)].sum() + pad.sum() + (q ** 2).sum()


def build(seed: int = 0) -> Views:
    torch.manual_seed(seed)
    return Views().eval()


def inputs() -> torch.Tensor:
    return torch.randn(16, 16, generator=torch.Generator().manual_seed(1))
