"""[issue 36 item 7] A folded run "xN" under a summed overlay is coloured per repetition, and the legend says so."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from exporters import overlays
from exporters.figures import build_scene
from exporters.layout import LayoutEngine


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.blocks = nn.ModuleList(Block() for _ in range(6))

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return x


def test_a_folded_run_is_valued_per_repetition_on_the_scale_of_single_blocks():
    trace = tracer.trace(Stack(), (torch.randn(2, 8),))
    ov = overlays.build_overlay(trace, "flops")
    engine = LayoutEngine(trace)
    folded = engine.layout(["", "blocks"], fold_repeats=True)
    runs = [n for n in folded.nodes if n.kind == "folded" and n.repeat > 1]
    assert runs, [(n.id, n.kind) for n in folded.nodes]
    one_block = overlays.node_values(engine.layout(["", "blocks"]), ov, "sum")["mod:blocks.0"]
    values = overlays.node_values(folded, ov, "sum")
    for run in runs:
        assert values[run.id] == pytest.approx(one_block)  # not N times a block against single ops
    scene = build_scene(trace, expanded=["", "blocks"], fold_repeats=True, overlay="flops", hide=())
    assert "folded runs: per repetition" in scene.legend["title"]
