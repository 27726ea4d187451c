"""What watches a capture besides the function mode: the completeness witness and the bridges.

The witness is a dispatch-level census (`TorchDispatchMode`) entered inside the capture's
function mode. Every aten call is counted against the function-level op being executed;
an aten call made while no function-level op runs (and no bridged hook runs) is computation
below the recorded ops: the trace is marked not verified and a `CaptureGapWarning` is issued.

`capture_scope` is the one place `tracer.trace` asks for all of this: it installs the
deployment bridges (accelerate offload hooks) for the session and, before the trace is built,
reports what the bridges and the witness found into the capture's `Findings`.
"""
from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from typing import Any, Callable, Iterator

from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from .ir import Op
from .provenance import Findings


class CaptureGapWarning(UserWarning):
    """Computation ran below the recorded ops: the trace is not a complete record."""


class DispatchCensus(TorchDispatchMode):
    """Counts aten calls per function-level call; flags the ones made outside any call."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self.depth = 0
        self.current_start = -1
        self.per_op: Counter = Counter()  # op index -> aten calls made while it ran
        self.unrecorded = 0  # aten calls inside a function-level call that recorded no op (item(), size())
        self.bridged = 0  # aten calls inside a bridged hook (accelerate weight loading)
        self.gaps: list[tuple[str, tuple]] = []  # (aten op, module stack) outside any call

    def wrap(self, on_call: Callable[..., Any]) -> Callable[..., Any]:
        """`on_call` with the "inside a function-level op" state kept for the census."""
        records = self.session.records

        def counted(func: Any, args: tuple, kwargs: dict) -> Any:
            self.depth += 1
            outer = self.current_start
            self.current_start = len(records)
            try:
                return on_call(func, args, kwargs)
            finally:
                self.depth -= 1
                self.current_start = outer

        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.depth:
            self.per_op[self.current_start] += 1
        elif self.session.suspended:
            self.bridged += 1
        else:
            self.gaps.append((str(func), self.session.stack))
        return func(*args, **(kwargs or {}))

    def report(self, ops: tuple[Op, ...], findings: Findings) -> None:
        """The census as `Provenance.witness`; a gap marks the trace not verified and warns."""
        n = len(ops)
        counted = {i: c for i, c in self.per_op.items() if i < n}
        self.unrecorded = sum(c for i, c in self.per_op.items() if i >= n)
        census = {
            "aten_calls": sum(self.per_op.values()) + self.bridged + len(self.gaps),
            "attributed": sum(counted.values()), "unrecorded_calls": self.unrecorded,
            "bridged": self.bridged, "gaps": len(self.gaps),
            "gap_ops": sorted({g[0] for g in self.gaps})[:20],
        }
        findings.add(witness=census)
        if self.gaps:
            where = sorted({(g[1][-1][0] if g[1] else "") for g in self.gaps})
            msg = (f"completeness witness: {len(self.gaps)} aten call(s) ran below the recorded ops "
                   f"({', '.join(census['gap_ops'][:5])}) in module(s) {', '.join(repr(w) for w in where[:5])}; "
                   "the trace is not a complete record")
            findings.unverified(msg)
            warnings.warn(msg, CaptureGapWarning, stacklevel=4)


class CaptureScope:
    """The bridges and witness for one capture; `report` hands their findings to the builder."""

    def __init__(self, model: nn.Module, session: Any, witness: bool) -> None:
        self.model = model
        self.session = session
        self.census = DispatchCensus(session) if witness else None
        self.offload: Any = None

    def report(self, ops: tuple[Op, ...], calls: dict[str, tuple], findings: Findings) -> dict[str, tuple]:
        """Findings of the bridges and the witness; returns the live calls (offloaded weights deferred)."""
        from .bridges import bitsandbytes as bnb_bridge

        if self.offload is not None:
            calls = self.offload.report(calls, findings)
        bnb_bridge.disclose(ops, self.model, findings, getattr(self.session, "named", None))
        if self.census is not None:
            self.census.report(ops, findings)
        return calls


@contextlib.contextmanager
def capture_scope(model: nn.Module, session: Any, *, witness: bool = False) -> Iterator[CaptureScope]:
    """Bridges installed (and always removed) around `session.run`; the witness when asked."""
    from .bridges.accelerate import OffloadBridge

    scope = CaptureScope(model, session, witness)
    session.witness = scope.census
    bridge = OffloadBridge.for_model(model, session)
    try:
        if bridge is not None:
            bridge.install()
            scope.offload = bridge
        yield scope
    finally:
        if bridge is not None:
            bridge.remove()
        session.witness = None
