"""Capture gaps found from the finished ops: a forward that must have computed more than was recorded.

Two signs, read once after the forward (no per-call work): the model has parameters and no recorded
op read any of them, or an output is a tensor no recorded op produced (a `constant`: computation that
ran where the function mode could not see it). Either marks the trace `verified=False` with a
warning that names the cause, so validation cannot call a missing graph exact.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from ..ir import Op
from .session import R_ARGS, R_CALLSPEC


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
    if session.value_reads:  # values went into Python: an output rebuilt from Python data has no edge to them
        rebuilt = sorted({e.source for op in outputs for e in op.parents if _python_data_op(ops, e.source)})
        if rebuilt:
            findings.unverified(
                f"capture gap: the output {', '.join(rebuilt[:5])} was made from Python data after the forward read "
                f"tensor values into Python ({session.value_reads} value read(s): .item(), .tolist(), float(t)); no "
                "recorded edge connects it to what it was computed from", rebuilt[:20])
    if session.state_value_reads:
        reads = ", ".join(f"{a} ({how})" for a, how in list(session.state_value_reads.items())[:5])
        findings.warn(f"the forward read the values of {len(session.state_value_reads)} parameter/buffer tensor(s) "
                      f"into Python: {reads}; ops computed from those numbers take them as constants, with no "
                      "attribution to the tensor")
    packed = _packed_reads(session, ops)
    if packed:
        findings.unverified(
            f"capture gap: {len(packed)} op(s) ({', '.join(packed[:3])}) read packed quantized weights (a "
            "torch.ScriptObject, not a tensor); the trace records the op but attributes no parameter to it",
            packed[:20])
    if any(op.params for op in ops):  # the common case: stops at the first op that read one
        return
    buffers = session.buffer_ids
    n_params = sum(1 for tid in session.param_ids if tid not in buffers)
    if n_params:
        findings.unverified(
            f"capture gap: the model has {n_params} parameter tensor(s) and no recorded op read any of them; if the "
            "forward uses its parameters, that computation is missing from the trace")


_CONSTANT_LABEL = re.compile(r"constant_\d+")  # the label of a `constant` op (labels are `<kind>_<n>`)
_FROM_PYTHON_KINDS = frozenset({"tensor", "as_tensor", "scalar_tensor"})


def _python_data_op(ops: tuple[Op, ...], label: str) -> bool:
    """Whether `label` is an op that made a tensor from Python data alone (no tensor parent, no parameter)."""
    kind, _, n = label.rpartition("_")
    if kind not in _FROM_PYTHON_KINDS:
        return False
    op = next((o for o in reversed(ops) if o.label == label), None)
    return op is not None and not op.parents and not op.params


_QUANTIZED_MODULES = ("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized")


def _packed_reads(session: Any, ops: tuple[Op, ...]) -> list[str]:
    """Labels of ops whose call took a torch.ScriptObject (packed quantized weights); read only for a model
    holding a torch.ao quantized module (its walk is already made), so other captures pay one module scan."""
    every = getattr(session, "every", None) or ()
    if not any(type(m).__module__.startswith(_QUANTIZED_MODULES) for _a, m in every
               if isinstance(type(m).__module__, str)):
        return []
    script_object = torch._C.ScriptObject
    found = []
    for op, rec in zip(ops, session.records):
        spec = rec[R_CALLSPEC]
        args = spec[1] if spec is not None else (rec[R_ARGS] or ())
        if any(isinstance(a, script_object) for a in args):
            found.append(op.label)
    return found
