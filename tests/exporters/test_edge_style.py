"""Broadcast edges (one box feeding or gathering many) are drawn light; the rest stay dark."""
from __future__ import annotations

import torch

import tracer
from exporters.bokeh_graph import graph_figure
from exporters.layout import compute_layout, default_expansion
from exporters.layout.style import BACK_EDGE, BROADCAST_EDGE, EDGE, edge_colors
from tests.models import tiny_llama


def test_rotary_fan_out_is_light_and_the_residual_chain_is_not():
    t = tracer.trace(tiny_llama(n_layer=10), (torch.randint(0, 100, (1, 5)),))
    lay = compute_layout(t, default_expansion(t))
    colors = edge_colors(lay.edges)
    rotary = [c for e, c in zip(lay.edges, colors) if e.source == "mod:model.rotary_emb"]
    assert len(rotary) >= 8 and set(rotary) == {BROADCAST_EDGE}
    chain = [c for e, c in zip(lay.edges, colors)
             if e.source == "mod:model.layers.0" and e.target == "mod:model.layers.1"]
    assert chain == [EDGE]
    assert all(c == BACK_EDGE for e, c in zip(lay.edges, colors) if e.back_edge)
    fig = graph_figure(lay, t)
    (edges,) = fig.select(name="edges")
    assert list(edges.data_source.data["line_color"]) == colors
