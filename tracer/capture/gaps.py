"""Capture gaps found from the finished ops: a forward that must have computed more than was recorded.

Two signs, read once after the forward (no per-call work): the model has parameters and no recorded
op read any of them, or an output is a tensor no recorded op produced (a `constant`: computation that
ran where the function mode could not see it). Either marks the trace `verified=False` with a
warning that names the cause, so validation cannot call a missing graph exact.
"""
from __future__ import annotations

import re
from typing import Any

from ..ir import Op


def report(ops: tuple[Op, ...], session: Any, findings: Any) -> None:
    """Add the gap findings of a finished capture to `findings` (nothing when there is none)."""
    outputs = []
    for op in reversed(ops):  # output ops are recorded last, after the forward
        if op.kind != "output":
            break
        outputs.append(op)
    constant_out = sorted({e.source for op in outputs for e in op.parents if _CONSTANT_LABEL.fullmatch(e.source)})
    if constant_out:
        findings.unverified(
            f"capture gap: the output is {', '.join(constant_out[:5])}, a tensor no recorded op produced (its "
            "computation ran where the capture could not see it: a compiled region, a functorch transform, a "
            "kernel below torch's function layer); the trace does not record how it was computed", constant_out[:20])
    if any(op.params for op in ops):  # the common case: stops at the first op that read one
        return
    buffers = session.buffer_ids
    n_params = sum(1 for tid in session.param_ids if tid not in buffers)
    if n_params:
        findings.unverified(
            f"capture gap: the model has {n_params} parameter tensor(s) and no recorded op read any of them; if the "
            "forward uses its parameters, that computation is missing from the trace")


_CONSTANT_LABEL = re.compile(r"constant_\d+")  # the label of a `constant` op (labels are `<kind>_<n>`)
