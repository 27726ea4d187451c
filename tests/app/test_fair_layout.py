"""Fair sessions (issue 39): "Expand all" over a graph too wide to lay out on the server's one event
loop is refused with a readable message instead of holding every other session's round trips;
under the bounds it opens every module as before. The wide graph is a real traced model (1,200
small blocks, 3 ops and 6 edges each), built here."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from app import state as state_mod
from app.state import EXPAND_ALL_MAX_EDGES, EXPAND_ALL_MAX_OPS, ExplorerState, expand_all_size
from app.views.graph import GraphView

BLOCKS = 1_200


class _Mix(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * y + x, x - y


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Mix() for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for block in self.blocks:
            x, y = block(x, y)
        return x + y


def wide_model() -> nn.Module:
    """The factory `open_factory` imports (`tests.app.test_fair_layout:wide_model`)."""
    return _Wide().eval()


@pytest.fixture(scope="module")
def wide_loaded():
    from app.factory import open_factory

    return open_factory("tests.app.test_fair_layout:wide_model", (2, 4))


def test_expand_all_over_a_wide_graph_is_refused_with_a_message(wide_loaded):
    s = ExplorerState(wide_loaded)
    ops, edges = expand_all_size(s.trace)
    assert ops == len(s.trace.ops) > EXPAND_ALL_MAX_OPS and edges > EXPAND_ALL_MAX_EDGES
    graph = GraphView(state=s)
    before, layout = s.expanded, s.layout
    graph._view_action("expand-all")  # what the breadcrumb's "Expand all" link sends
    assert s.expanded == before and s.layout is layout, "no layout was computed on the server's loop"
    assert "refused" in s.message and f"{ops:,} ops" in s.message and "one by one" in s.message
    assert f"{ops:,} ops" in graph._summary_html()  # the status line shows it


def test_expand_all_under_the_bounds_opens_every_module(wide_loaded, monkeypatch):
    s = ExplorerState(wide_loaded)
    ops, edges = expand_all_size(s.trace)
    monkeypatch.setattr(state_mod, "EXPAND_ALL_MAX_OPS", ops)  # the same graph, now exactly at the bounds
    monkeypatch.setattr(state_mod, "EXPAND_ALL_MAX_EDGES", edges)
    s.expand_all()
    assert set(s.trace.modules) <= s.expanded and s.message == "Opened every module."


def test_expand_all_under_a_focused_block_of_the_wide_graph_is_drawn(wide_loaded):
    s = ExplorerState(wide_loaded)
    s.focused = "blocks.7"
    assert expand_all_size(s.trace, "blocks.7") == (3, 6)  # mul, add and sub, two parents each
    s.expand_all()
    assert "blocks.7" in s.expanded and "refused" not in s.message


def test_the_size_counts_the_ops_in_and_under_the_module(tiny_loaded):
    trace = tiny_loaded.trace
    inside = [o for o in trace.ops if o.module == "model.layers.0" or o.module.startswith("model.layers.0.")]
    assert inside and expand_all_size(trace, "model.layers.0") == (len(inside), sum(len(o.parents) for o in inside))
    assert expand_all_size(trace, "")[0] == len(trace.ops)
