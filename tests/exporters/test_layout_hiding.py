"""[issue 36 item 7] Hiding a family leaves no orphan: an op computed only from hidden ops is hidden too."""
from __future__ import annotations

import torch
from torch import nn

import tracer
from exporters.layout import LayoutEngine
from exporters.layout.hiding import PLUMBING, hidden_ops
from tests.models import tiny_gpt2


class Positions(nn.Module):
    """`arange + 8` feeding an embedding: the add has the hidden arange as its only input."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 4)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.emb(torch.arange(x.shape[1]) + 8) + x)


def _orphans(trace, layout) -> list[str]:
    """Drawn op boxes whose op has inputs but which no drawn edge enters (an op reading a parameter, such
    as the position embedding over a hidden arange, is a source in its own right and may start a path)."""
    entered = {e.target for e in layout.edges}
    return [n.id for n in layout.nodes if n.kind == "op" and trace[n.op_label].parents
            and not trace[n.op_label].params and n.id not in entered]


def test_an_op_fed_only_by_hidden_ops_is_hidden_and_nothing_drawn_is_an_orphan():
    trace = tracer.trace(Positions(), (torch.randn(1, 5, 4),))
    hidden = hidden_ops(trace, PLUMBING)
    assert {"arange_1", "add_1"} <= hidden and "add_2" not in hidden and "embedding_1" not in hidden
    layout = LayoutEngine(trace, hidden).layout()
    assert not [n.id for n in layout.nodes if n.id == "add_1"]
    assert _orphans(trace, layout) == []


def test_gpt2_with_plumbing_hidden_draws_no_orphan_box():
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    hidden = hidden_ops(trace, PLUMBING)
    exp = {a for a in trace.modules}  # every module open: each op is its own box
    layout = LayoutEngine(trace, hidden).layout(exp)
    assert _orphans(trace, layout) == []


def test_ops_fed_through_hidden_plumbing_by_drawn_ops_stay_drawn():
    """Attention after its views and transposes, the residual adds after dropout: computation, not plumbing."""
    trace = tracer.trace(tiny_gpt2(), (torch.randint(0, 100, (1, 8)),))
    hidden = hidden_ops(trace, PLUMBING)
    for kind in ("scaled_dot_product_attention", "linear", "layer_norm", "tanh", "pow"):  # tanh, pow: GELU
        ops = [op.label for op in trace.ops if op.kind == kind]
        assert ops and not set(ops) & hidden, (kind, sorted(set(ops) & hidden))
    residual = [op for op in trace.ops if op.kind == "add" and any("dropout" in trace[e.source].kind
                                                                   for e in op.parents)]
    assert residual and not {op.label for op in residual} & hidden
