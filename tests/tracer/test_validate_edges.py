"""[issue 11] The edge check never cries wolf, and still catches a wrong recorded edge.

Arguments whose values cannot move the output in this forward (a destination every element of
which is overwritten, an index into a dimension of size 1, a size the other arguments fix, a
mask whose selected positions already hold the written value) are reported "not perturbable"
with a reason, in the report and its text; a partial overwrite and a real index still carry data;
a trace whose parent is rewired to the wrong tensor still fails.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

import tracer
from tracer.ir import Edge, Trace
from tracer.replay.validate import validation_report


def _op(t, kind, n=0):
    return [op for op in t.ops if op.kind == kind][n]


def _not_perturbable(report, label, position):
    return [why for lab, pos, why in report.not_perturbable if (lab, pos) == (label, position)]


class _Router(nn.Module):
    """MoE-style routing: a 0/1 expert mask scattered into zeros at the top-k experts."""

    def __init__(self, experts: int, k: int) -> None:
        super().__init__()
        self.gate = nn.Linear(8, experts)
        self.k = k

    def forward(self, x):
        logits = self.gate(x)
        idx = torch.topk(logits, self.k, dim=-1).indices
        lowest = torch.topk(-logits, self.k, dim=-1).indices  # the k weakest experts
        mask = torch.zeros_like(logits).scatter_(1, idx, 1.0)
        return logits * mask, logits.gather(1, lowest)


def test_scatter_into_zeros_that_covers_every_element_is_not_perturbable_not_failed():
    torch.manual_seed(0)
    t = tracer.trace(_Router(experts=4, k=4), (torch.randn(5, 8),))  # top-4 of 4: every slot written
    report = validation_report(t)
    assert report.passed, report.to_text()
    scatter = _op(t, "scatter_")
    why = _not_perturbable(report, scatter.label, "0")
    assert why and "overwrites every element" in why[0]
    assert f"not perturbable {scatter.label} argument 0: not perturbable: scatter_ overwrites" in report.to_text()
    assert [list(e) for e in report.not_perturbable] == report.to_dict()["not_perturbable"]
    assert report.edges_carrying + report.edges_excused + report.edges_not_perturbable == report.edges_checked


def test_a_partial_scatter_destination_and_its_indices_carry_data():
    torch.manual_seed(0)
    t = tracer.trace(_Router(experts=6, k=2), (torch.randn(5, 8),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    scatter = _op(t, "scatter_")
    assert not _not_perturbable(report, scatter.label, "0")  # zeros survive where no expert is chosen
    assert not _not_perturbable(report, scatter.label, "2")  # other in-range indices move the mask


class _TokenTypes(nn.Module):
    """BERT-style token types: zeros expanded from a buffer, looked up in a table of `rows` rows."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.types = nn.Embedding(rows, 8)
        self.register_buffer("ids", torch.zeros(1, 6, dtype=torch.long), persistent=False)

    def forward(self, h):
        return h + self.types(self.ids.expand(h.shape[0], -1))


def test_an_index_into_a_single_row_table_is_not_perturbable_and_a_real_table_carries():
    single = tracer.trace(_TokenTypes(rows=1), (torch.randn(2, 6, 8),))
    report = validation_report(single)
    assert report.passed, report.to_text()
    emb = _op(single, "embedding")
    assert _not_perturbable(report, emb.label, "0") == [
        "not perturbable: indices into a dimension of size 1: the only valid index is 0"]
    several = tracer.trace(_TokenTypes(rows=3), (torch.randn(2, 6, 8),))
    report = validation_report(several)
    assert report.passed and not _not_perturbable(report, _op(several, "embedding").label, "0")


class _TensorSizedView(nn.Module):
    """Longformer-style: a size computed as a tensor and passed to view."""

    def forward(self, x):
        n = torch.tensor(x.shape[1]) // 2
        return (x * 2).view(x.shape[0], n, 2, x.shape[-1]).sum(2)


def test_a_tensor_used_as_a_size_is_not_perturbable_not_failed():
    t = tracer.trace(_TensorSizedView(), (torch.randn(2, 6, 4),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    view = _op(t, "view")
    # every other size is rejected by view, and -1 infers the same one: no change can move the output
    why = _not_perturbable(report, view.label, "2")
    assert why and why[0].startswith("not perturbable: an integer or boolean argument")


class _SplineLike(nn.Module):
    """VITS-style: a zeros destination written under a mask with the value it already holds, then filled."""

    def forward(self, x):
        out = torch.zeros_like(x)
        out[x > 100.0] = 0.0  # no element exceeds 100 and zeros are written into zeros: the mask cannot matter
        full = torch.zeros_like(x)
        full[:, :] = x * 3  # covers the destination
        part = torch.zeros_like(x)
        part[:, :2] = x[:, :2] + 1  # leaves zeros in the rest: the destination carries data
        return out + full + part


def test_setitem_masks_and_covered_destinations_are_disclosed_and_partial_ones_carry():
    torch.manual_seed(0)
    t = tracer.trace(_SplineLike(), (torch.randn(3, 4),))
    report = validation_report(t)
    assert report.passed, report.to_text()
    masked, full, part = (_op(t, "setitem", i) for i in range(3))
    assert _not_perturbable(report, masked.label, "1")  # the boolean index
    assert "overwrites every element" in _not_perturbable(report, full.label, "0")[0]
    assert not _not_perturbable(report, part.label, "0")
    for _label, _pos, why in report.not_perturbable:
        assert why.startswith("not perturbable:")


def _rewired(t: Trace, victim, position: str, source: str) -> Trace:
    edges = tuple(Edge(source, e.position) if e.position == position else e for e in victim.parents)
    ops = tuple(dataclasses.replace(op, parents=edges) if op.label == victim.label else op for op in t.ops)
    return Trace(ops=ops, modules=t.modules, params=t.params, model_class=t.model_class,
                 provenance=dict(t.provenance), values=t.values, live_calls=t.live_calls)


def test_a_destination_rewired_to_the_wrong_tensor_still_fails():
    torch.manual_seed(0)
    t = tracer.trace(_SplineLike(), (torch.randn(3, 4),))
    part = _op(t, "setitem", 2)
    wrong = _op(t, "mul")  # same shape as the zeros destination, other values
    assert t.values[wrong.label].shape == t.values[part.parents[0].source].shape
    report = validation_report(_rewired(t, part, "0", wrong.label))
    assert not report.passed and report.first_failing_op == part.label


def test_a_router_index_rewired_to_the_wrong_tensor_still_fails():
    torch.manual_seed(0)
    t = tracer.trace(_Router(experts=6, k=2), (torch.randn(5, 8),))
    scatter = _op(t, "scatter_")
    weakest = [op for op in t.ops if op.kind == "topk" and op.output_index == 1][1]  # same shape, other indices
    assert scatter.parents[1].position == "2" and scatter.parents[1].source != weakest.label
    report = validation_report(_rewired(t, scatter, "2", weakest.label))
    assert not report.passed and report.first_failing_op == scatter.label


def test_an_empty_output_beside_a_full_one_is_not_a_false_edge_alarm():
    """torch.split into [8, 0] (DeepSeek-V3.2's indexer at zoo sizes): the empty chunk cannot change when the
    parent is perturbed; the full chunk carries the edge. The check once failed the edge on the empty one."""
    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            a, b = torch.split(self.proj(x).view(1, 2, 8), [8, 0], -1)
            return a.sum(-1) + b.sum(-1)

    report = validation_report(tracer.trace(Split(), (torch.randn(2, 8),)))
    assert report.passed, report
