"""What each replayed op received: its parents' saved values, or a base rebuilt after writes through its views.

An in-place write into a view (`base[..., idx] = x`, `buf[:, :k].copy_(y)`) changes the view's base
too; the capture then routes later readers of the base to the write. The write's saved value is
the view, so a reader of the base is replayed from the base as it was after the write, rebuilt
here from saved values alone: the base before the write (saved copy-on-write), the recorded view
ops replayed on a copy of it, and the write replayed into that view.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from ..ir import Edge, Op, Trace
from .interpreter import Replayer, substitute

# Kernels whose output (argument 0's) is a view of argument 0: a write into it lands in its base.
VIEW_KINDS = frozenset({
    "getitem", "view", "view_as", "reshape", "narrow", "select", "slice", "transpose", "swapaxes", "swapdims",
    "permute", "t", "T", "mT", "unsqueeze", "squeeze", "flatten", "unflatten", "movedim", "moveaxis",
    "diagonal", "as_strided", "unfold", "split", "split_with_sizes", "chunk", "unbind", "tensor_split",
    "real", "imag", "view_as_real", "view_as_complex", "detach", "alias", "expand",
})


class ReceivingReplayer(Replayer):
    """A `Replayer` that hands each op what it received during the forward (see the module docstring)."""

    def __init__(self, trace: Trace, params: Mapping[str, torch.Tensor] | None = None) -> None:
        super().__init__(trace, params)
        self.received: dict[str, dict[str, torch.Tensor]] = {}  # op label -> position -> value it read
        self._after: dict[str, torch.Tensor | None] = {}

    def run(self, op: Op, override: Mapping[str, torch.Tensor] | None = None, grad: bool = False) -> Any:
        got = self.received.get(op.label)
        if got:
            override = {**got, **(override or {})}
        return super().run(op, override, grad)

    def parent_value(self, op: Op, edge: Edge) -> torch.Tensor:
        """The value `op` read at `edge.position`."""
        got = self.received.get(op.label)
        if got is not None and edge.position in got:
            return got[edge.position]
        return self.values[edge.source]

    def bases_after_view_writes(self, op: Op) -> dict[str, torch.Tensor]:
        """For each parent of `op` that wrote through a view: position -> the base after that write."""
        out = {}
        for edge in op.parents:
            base = self.base_after(self.trace[edge.source])
            if base is not None:
                out[edge.position] = base
        return out

    def base_after(self, write: Op) -> torch.Tensor | None:
        """The base of `write`'s target after the write, or None when `write` did not write through a view."""
        if write.label not in self._after:
            self._after[write.label] = None  # a cycle (it cannot happen in a trace) ends here
            try:
                self._after[write.label] = self._rebuild(write)
            except Exception:  # not rebuildable: the reader is replayed from the saved value as recorded
                self._after[write.label] = None
        return self._after[write.label]

    def _rebuild(self, write: Op) -> torch.Tensor | None:
        """Walk from the write's target to the tensor that owns its memory, then replay the write into it.

        Walking up, view ops make the target's geometry; an in-place op passed on the way is a write into
        the same memory (its target is the tensor walked through), and the first one met holds the base's
        latest state. The walk stops at the first op read as the base whose geometry gives the target's shape.
        """
        edge = _parent_at(write, "out") or _parent_at(write, "0")  # the written tensor
        if not write.inplace or edge is None or write.out is None:
            return None
        chain: list[Op] = []
        state: torch.Tensor | None = None
        op = self.trace[edge.source]
        while True:
            up = _parent_at(op, "0")
            if op.kind in VIEW_KINDS and up is not None:
                chain.append(op)
            else:
                if state is None:
                    state = self._state_after(op)
                    if state is None:
                        return None
                if chain:
                    rebuilt = self._write_into(write, edge.position, state, chain)
                    if rebuilt is not None:
                        return rebuilt
                if not op.inplace or up is None:
                    return None
            op = self.trace[up.source]

    def _state_after(self, op: Op) -> torch.Tensor | None:
        """The memory `op` wrote or produced, as it was after `op`."""
        after = self.base_after(op) if op.inplace else None
        return after if after is not None else self.values.get(op.label)

    def _write_into(self, write: Op, position: str, state: torch.Tensor, chain: list[Op]) -> torch.Tensor | None:
        """A copy of `state` with `write` replayed into the view `chain` makes of it (None if that view does not fit)."""
        base = state.detach().clone()
        view = base
        for v in reversed(chain):
            view = super().run(v, {"0": view})
            if not isinstance(view, torch.Tensor) or not _shares_storage(view, base):
                return None  # a copy, not a view: the write never reached the base
        if tuple(view.shape) != tuple(write.out.shape):
            return None
        func, args, kwargs = self.call_of(write)
        subs = {e.position: self.parent_value(write, e) for e in write.parents}
        subs[position] = view
        new_args, new_kwargs = substitute(args, kwargs, subs)
        with torch.no_grad():
            func(*new_args, **new_kwargs)
        return base


def _parent_at(op: Op, position: str) -> Edge | None:
    return next((e for e in op.parents if e.position == position), None)


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() != 0
    except (RuntimeError, NotImplementedError):
        return False
