"""Capture gaps found from the finished ops: a forward that must have computed more than was recorded.

Two signs, read once after the forward (no per-call work): the model has parameters and no recorded
op read any of them, or an output is a tensor no recorded op produced (a `constant`: computation that
ran where the function mode could not see it). Either marks the trace `verified=False` with a
warning that names the cause, so validation cannot call a missing graph exact.
"""
from __future__ import annotations

from typing import Any

from ..ir import Op


def report(ops: tuple[Op, ...], session: Any, findings: Any) -> None:
    """Add the gap findings of a finished capture to `findings` (nothing when there is none)."""
    by_label = {op.label: op for op in ops}
    outputs = [op for op in ops if op.kind == "output"]
    constant_out = sorted({e.source for op in outputs for e in op.parents
                           if by_label.get(e.source) is not None and by_label[e.source].kind == "constant"})
    if constant_out:
        findings.unverified(
            f"capture gap: the output is {', '.join(constant_out[:5])}, a tensor no recorded op produced (its "
            "computation ran where the capture could not see it: a compiled region, a functorch transform, a "
            "kernel below torch's function layer); the trace does not record how it was computed", constant_out[:20])
    n_params = sum(1 for addr in session.param_ids.values() if addr not in _buffers(session))
    if n_params and not any(op.params for op in ops if op.kind not in ("input", "output")) \
            and not any(op.params for op in outputs):
        findings.unverified(
            f"capture gap: the model has {n_params} parameter tensor(s) and no recorded op read any of them; if the "
            "forward uses its parameters, that computation is missing from the trace")


def _buffers(session: Any) -> set[str]:
    ids = session.buffer_ids
    return {addr for tid, addr in session.param_ids.items() if tid in ids}
