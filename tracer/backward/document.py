"""The saved form of a backward (in trace.json): nodes, saved-for-backward tensors, what was run.

Gradient values go to grads.safetensors beside it (`tracer.store.grads`); this record names that
file's version, digest, and every gradient's shape and dtype. The live autograd graph and the replay
gradients are not saved. Loading checks every reference (node indices, op labels, parameter
addresses) and bound, and refuses typed.
"""
from __future__ import annotations

import msgspec

from ..errors import TraceStructureInvalidError
from .records import BackwardNode, BackwardPass, SavedTensor

MAX_BYTES = 1 << 62


class GradsDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The gradients file: its version, SHA-256, and `op:LABEL` / `param:ADDRESS` -> (shape, dtype)."""

    version: int
    digest: str
    tensors: dict[str, tuple[tuple[int, ...], str]]


class BackwardDoc(msgspec.Struct, forbid_unknown_fields=True):
    """The `backward` member of a trace body."""

    nodes: tuple[BackwardNode, ...]
    saved: dict[str, tuple[SavedTensor, ...]]
    loss: str
    estimate: bool
    no_node: tuple[str, ...]
    recomputed: dict[str, int]
    notes: tuple[str, ...]
    gradients: GradsDoc | None = None  # absent in traces saved before gradients were kept


def to_doc(bw: BackwardPass, gradients: GradsDoc | None = None) -> BackwardDoc:
    """What of a backward goes into trace.json (`gradients`: the record of its grads file, if written)."""
    return BackwardDoc(bw.nodes, bw.saved, bw.loss, bw.estimate, bw.no_node, bw.recomputed, bw.notes, gradients)


def from_doc(doc: BackwardDoc, labels: frozenset[str], modules: frozenset[str], site: str,
             params: frozenset[str] = frozenset()) -> BackwardPass:
    """The loaded backward (gradients not yet read), every reference and bound checked."""
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
    if doc.gradients is not None:
        from ..store.grads import check_grads_doc

        check_grads_doc(doc.gradients, labels, params, f"{where}.gradients")
    return BackwardPass(nodes=doc.nodes, saved=doc.saved, loss=doc.loss, estimate=doc.estimate, no_node=doc.no_node,
                        recomputed=doc.recomputed, notes=doc.notes)
