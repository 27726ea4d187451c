"""Calls whose output i is made from argument i alone (meshgrid, broadcast_tensors), as varargs or as one
list: each output's edge check asks only its own argument. meshgrid's outputs failed the edge check on
the other argument (Deformable DETR, Grounding DINO, Mask2Former in the zoo), and varargs
broadcast_tensors excused every argument of every output."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracer
from tracer.replay.interpreter import dependence_declared_absent


class Grids(nn.Module):
    def __init__(self, as_list: bool) -> None:
        super().__init__()
        self.fc, self.as_list = nn.Linear(2, 2), as_list

    def forward(self, x):
        h, w = x.shape[1], x.shape[2]
        ys, xs = torch.linspace(0.5, h - 0.5, h), torch.linspace(0.5, w - 0.5, w)
        if self.as_list:
            gy, gx = torch.meshgrid([ys, xs], indexing="ij")
        else:
            gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        by, bx = torch.broadcast_tensors(gy, x[0, :, :1])
        return self.fc(torch.stack((gx.reshape(-1) / w, (gy + by + bx).reshape(-1) / h), -1))


@pytest.mark.parametrize("as_list", [False, True], ids=["varargs", "list"])
def test_each_output_of_an_itemwise_call_reads_its_own_argument(as_list):
    trace = tracer.trace(Grids(as_list).eval(), (torch.randn(1, 3, 4),))
    report = tracer.validate(trace)
    assert report.passed, report.to_text()
    for op in trace.ops:
        if op.kind in ("meshgrid", "broadcast_tensors"):
            own = {e.position for e in op.parents if e.position in (str(op.output_index), f"0.{op.output_index}")}
            assert len(own) == 1 and not dependence_declared_absent(op, own.pop())
            others = [e.position for e in op.parents if e.position not in (str(op.output_index),
                                                                           f"0.{op.output_index}")]
            assert others and all(dependence_declared_absent(op, p) for p in others)


class Overflow(nn.Module):
    """A forward whose last product is NaN: finite features times an overflowed tower's +-inf (ALIGN's tiny
    config: text embeddings @ image embeddings.t() with the image side infinite)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.tower = nn.Parameter(torch.tensor([1.0, -1.0, 1.0, -1.0]))

    def forward(self, x):
        infinite = (self.tower * 1e38 * 1e38).unsqueeze(1)  # +inf, -inf, +inf, -inf
        return (torch.relu(self.fc(x)) + 1) @ infinite  # positive times +inf and -inf: NaN


def test_an_output_with_no_finite_value_is_not_perturbable_rather_than_a_failed_edge():
    torch.manual_seed(0)
    trace = tracer.trace(Overflow().eval(), (torch.randn(3, 4),))
    assert not torch.isfinite(trace.output).any()
    report = tracer.validate(trace)
    assert report.passed, report.to_text()
    assert report.edges_not_perturbable > 0
    assert any("holds no finite value" in why for _op, _pos, why in report.not_perturbable)
