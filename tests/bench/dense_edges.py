"""A real traced model whose graph is dense in edges (the shape of issue 39's 11,218-edge trace): STAGES
stages of BLOCKS blocks, each block stacking the output of every block before it, so the expanded graph has
about (STAGES * BLOCKS)^2 / 2 edges while the default view (the stages as boxes) stays small.

`dense_model` is the factory (`--model tests.bench.dense_edges:dense_model --input-shape 2,4`);
`python tests/bench/dense_edges.py OUT` saves its trace as a folder and prints its size.
"""
from __future__ import annotations

import sys

import torch
from torch import nn

STAGES, BLOCKS = 15, 10


class Block(nn.Module):
    """Stacks every earlier output (one op with that many parents) and mixes them."""

    def forward(self, earlier: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(earlier).mean(0).tanh()


class Stage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))

    def forward(self, earlier: list[torch.Tensor]) -> list[torch.Tensor]:
        for block in self.blocks:
            earlier = earlier + [block(earlier)]
        return earlier


class DenseEdges(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stages = nn.ModuleList(Stage() for _ in range(STAGES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        earlier = [x]
        for stage in self.stages:
            earlier = stage(earlier)
        return earlier[-1]


def dense_model() -> nn.Module:
    return DenseEdges().eval()


def main(out: str) -> int:
    import tracer

    trace = tracer.trace(dense_model(), (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),),
                         capture=tracer.CaptureOptions(save="none") if hasattr(tracer, "CaptureOptions") else None)
    folder = trace.save(out)
    edges = sum(len(op.parents) for op in trace.ops)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(f"{folder}: {len(trace.ops):,} ops, {edges:,} edges, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.dirname(
        __import__("os").path.abspath(__file__)))))
    raise SystemExit(main(sys.argv[1]))
