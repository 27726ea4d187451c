"""Validation of a recorded backward: each autograd node replayed from its recorded incoming gradients.

Needs a trace captured in this process with `CaptureOptions(backward=True, backward_replay=True)`
(the autograd graph and every node's gradients kept); a reloaded trace, whose gradients load but
whose autograd nodes do not, is refused typed (`tracer.backward.offline` checks it instead). Each
node except `AccumulateGrad` (whose only effect is `param.grad`) is called again on the gradients it
received; its outputs must equal the gradients it passed on, bit for bit where the node replays bit
for bit (it is replayed twice to tell), else within the spread of its own replays (disclosed per
node). As the engine does, a gradient computed at a broadcast shape is summed down to the shape its
input had.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ReplayUnavailableError


@dataclass(frozen=True)
class BackwardFinding:
    """One node whose replay does not give the recorded gradients."""

    index: int
    name: str
    op: str | None
    message: str


@dataclass(frozen=True)
class BackwardReport:
    """The result of `validate_backward`; truthy when every replayed node matched."""

    nodes_total: int
    nodes_replayed: int
    nodes_exact: int
    nodes_within_spread: int
    findings: tuple[BackwardFinding, ...] = ()
    tolerances: dict[int, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.findings


def validate_backward(trace: Any) -> BackwardReport:
    """Replay every recorded backward node and compare with the gradients it passed on."""
    bw = getattr(trace, "backward", None)
    if bw is None or not bw.live_nodes:
        reloaded = bw is not None and (bw.grads or bw.param_grads) and not bw.node_grads
        why = ("it was loaded from a folder: its gradients were saved, but a node is replayed by the live autograd "
               "node of the capturing process, which is not saved; check it with tracer.backward.offline."
               "validate_backward_offline(trace, params=model))" if reloaded else "no live autograd graph")
        raise ReplayUnavailableError(
            f"this trace holds no replayable backward ({why})", site="validate_backward(trace)",
            remedy="Capture in this process with CaptureOptions(backward=True, backward_replay=True); a weights-free "
                   "(meta) or reloaded trace has no autograd nodes to replay.")
    findings, exact, spread_ok, replayed, tolerances = [], 0, 0, 0, {}
    for rec, fn in zip(bw.nodes, bw.live_nodes):
        io = bw.node_grads.get(rec.index)
        if io is None or rec.name.endswith("AccumulateGrad"):
            continue
        incoming, recorded = io
        replayed += 1
        with torch.no_grad():
            first, second = _call(fn, incoming), _call(fn, incoming)
        spread = _max_diff(first, second)
        diff = _max_diff(first, recorded)
        if diff == 0.0:
            exact += 1
        elif spread > 0 and diff <= spread:
            spread_ok += 1
            tolerances[rec.index] = spread
        else:
            findings.append(BackwardFinding(rec.index, rec.name, rec.op,
                                            f"replay differs from the recorded gradient (max abs diff {diff:.3e}; "
                                            f"replay-to-replay spread {spread:.3e})"))
    return BackwardReport(len(bw.nodes), replayed, exact, spread_ok, tuple(findings), tolerances)


def _call(fn: Any, incoming: tuple) -> tuple:
    out = fn(*incoming)
    return out if isinstance(out, tuple) else (out,)


def _max_diff(a: tuple, b: tuple) -> float:
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if x is None or y is None:  # the engine asks only for the gradients some edge needs
            if x is None and y is not None:
                return float("inf")
            continue
        if x.shape != y.shape:  # the engine sums a broadcast gradient down to its input's shape
            try:
                x = x.sum_to_size(y.shape)
            except RuntimeError:
                return float("inf")
        if x.numel():
            d = (x.double() - y.double()).abs().max().item()
            worst = max(worst, d if d == d else float("inf"))
    return worst
