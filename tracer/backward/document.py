"""The saved form of a backward (in trace.json): nodes, saved-for-backward tensors, what was run.

Gradient values, the live autograd graph and the replay gradients are not saved: a reloaded
backward holds the structure and the bytes, not the numbers. Loading checks every reference
(node indices, op labels) and bound, and refuses typed.
"""
from __future__ import annotations

import msgspec

from ..errors import TraceStructureInvalidError
from .records import BackwardNode, BackwardPass, SavedTensor

MAX_BYTES = 1 << 62


class BackwardDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The `backward` member of a trace body."""

    nodes: tuple[BackwardNode, ...]
    saved: dict[str, tuple[SavedTensor, ...]]
    loss: str
    estimate: bool
    no_node: tuple[str, ...]
    recomputed: dict[str, int]
    notes: tuple[str, ...]


def to_doc(bw: BackwardPass) -> BackwardDoc:
    """What of a backward goes into trace.json."""
    return BackwardDoc(bw.nodes, bw.saved, bw.loss, bw.estimate, bw.no_node, bw.recomputed, bw.notes)


def from_doc(doc: BackwardDoc, labels: frozenset[str], modules: frozenset[str], site: str) -> BackwardPass:
    """The loaded backward, every reference and bound checked."""
    where = f"{site}: backward"
    n = len(doc.nodes)
    for i, node in enumerate(doc.nodes):
        at = f"{where}.nodes[{i}]"
        if node.index != i:
            raise TraceStructureInvalidError(f"{at}: index {node.index} is not its position", site=at)
        if node.op is not None and node.op not in labels:
            raise TraceStructureInvalidError(f"{at}: op {node.op!r} is not an op of this trace", site=at)
        if any(not 0 <= j < n for j in node.next) or (node.order is not None and not 0 <= node.order < n):
            raise TraceStructureInvalidError(f"{at}: a node index is out of range", site=at)
        if any(s is not None and any(d < 0 for d in s) for s in node.grad_shapes):
            raise TraceStructureInvalidError(f"{at}: a negative gradient dimension", site=at)
    for label, rows in doc.saved.items():
        if label not in labels:
            raise TraceStructureInvalidError(f"{where}.saved: {label!r} is not an op of this trace", site=where)
        for s in rows:
            if not 0 <= s.bytes <= MAX_BYTES or any(d < 0 for d in s.shape):
                raise TraceStructureInvalidError(f"{where}.saved[{label!r}]: a negative or huge size", site=where)
    if any(x not in labels for x in doc.no_node) or any(a not in modules or c < 0 for a, c in doc.recomputed.items()):
        raise TraceStructureInvalidError(f"{where}: no_node or recomputed names something this trace lacks", site=where)
    return BackwardPass(nodes=doc.nodes, saved=doc.saved, loss=doc.loss, estimate=doc.estimate, no_node=doc.no_node,
                        recomputed=doc.recomputed, notes=doc.notes)
