"""What a backward capture records: autograd nodes linked to forward ops, and what each op saves."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SavedTensor:
    """One tensor an op saved for backward: its geometry, and what it aliases (nothing is counted twice)."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int
    alias: str  # "param:ADDR", "output:LABEL" (an op's output, already an activation), "input:LABEL" or "new"


@dataclass(frozen=True)
class BackwardNode:
    """One autograd node: its grad_fn name, the forward op it differentiates, where its gradients go."""

    index: int
    name: str  # e.g. "AddmmBackward0", "AccumulateGrad"
    op: str | None  # the forward op whose output this node differentiates (None: an internal node)
    param: str | None  # for AccumulateGrad: the parameter's address
    next: tuple[int, ...]  # nodes this one passes gradients to (toward the inputs and parameters)
    order: int | None  # execution order in the backward (None: did not run)
    grad_shapes: tuple[tuple[int, ...] | None, ...] = ()  # the incoming gradients (of the op's outputs)


@dataclass(frozen=True)
class BackwardPass:
    """The backward of one captured forward: nodes, saved-for-backward tensors per op, and gradients.

    `grads` maps op labels to the gradient of their first output (per the save_grads policy);
    `param_grads` maps parameter addresses to their `.grad` after this backward (copies).
    On meta (weights-free) nothing holds values: shapes and bytes are estimates from shapes times
    dtypes, labelled as such by `estimate`.
    """

    nodes: tuple[BackwardNode, ...]
    saved: dict[str, tuple[SavedTensor, ...]]
    loss: str  # how the scalar was made, e.g. "output.sum()"
    estimate: bool = False  # True on meta: bytes are shapes times dtypes, nothing ran on real data
    grads: dict[str, Any] = field(default_factory=dict, repr=False)
    param_grads: dict[str, Any] = field(default_factory=dict, repr=False)
    no_node: tuple[str, ...] = ()  # forward ops with no autograd node (no_grad, integer outputs, no grad inputs)
    recomputed: dict[str, int] = field(default_factory=dict)  # module address -> calls re-run in backward (checkpointing)
    notes: tuple[str, ...] = ()
    # With CaptureOptions(backward_replay=True): node index -> (incoming grads, outgoing grads), and the
    # live autograd nodes (this process only, never saved) for `validate_backward`.
    node_grads: dict[int, tuple[tuple, tuple]] = field(default_factory=dict, repr=False)
    live_nodes: tuple = field(default=(), repr=False)

    def node_of(self, label: str) -> BackwardNode | None:
        """The node differentiating forward op `label`, if any."""
        return next((n for n in self.nodes if n.op == label), None)

    def saved_bytes(self, label: str | None = None, *, unique: bool = True) -> int:
        """Bytes saved for backward (by one op, or all): with `unique`, only tensors no other record holds."""
        rows = self.saved.get(label, ()) if label is not None else [s for v in self.saved.values() for s in v]
        return sum(s.bytes for s in rows if not unique or s.alias == "new")

    def held_bytes(self, label: str | None = None) -> int:
        """Bytes of every tensor saved for backward except parameters (they are held anyway)."""
        rows = self.saved.get(label, ()) if label is not None else [s for v in self.saved.values() for s in v]
        seen, total = set(), 0
        for s in rows:
            key = s.alias if s.alias != "new" else None
            if s.alias.startswith("param:") or (key is not None and key in seen):
                continue
            if key is not None:
                seen.add(key)
            total += s.bytes
        return total
