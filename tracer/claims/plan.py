"""Intervention sites and plan audits: where a planned tensor would go, and whether it fits.

A site is any op output, addressed by its label (`linear_3`), by a module path (the module
call's first output: `model.layers.0.mlp` or `model.layers.0.mlp:1` for its second call), or
by both (`model.layers.0.mlp/linear_3`). An audit reads shapes and dtypes only; it never runs.
On a REFUTED trace (or one whose file says it was REFUTED when saved) those shapes were contradicted
by a real capture: the report is not ok and names the contradiction, and each site row says REFUTED.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import InvalidInputError
from ..ir import INPUT_KIND, OUTPUT_KIND, Op, TensorMeta, Trace
from .ladder import Ladder, contradiction_text
from .seal import state_when_saved

FITS, BROADCASTS = "fits", "broadcasts"
MISSING, SHAPE_MISMATCH, DTYPE_MISMATCH = "missing_site", "shape_mismatch", "dtype_mismatch"


def intervention_sites(trace: Trace) -> list[dict[str, Any]]:
    """One row per op output that an intervention can address: label, module path, shape, dtype, and the
    trace's claim state (REFUTED: these shapes were contradicted by a real capture)."""
    rows = []
    state = trace.ladder_state
    for op in trace.ops:
        if op.out is None or op.kind == OUTPUT_KIND:
            continue
        rows.append({"label": op.label, "module": op.module_address,
                     "path": f"{op.module_address}/{op.label}" if op.module_address else op.label,
                     "shape": list(op.out.shape), "dtype": op.out.dtype, "kind": op.kind,
                     "is_input": op.kind == INPUT_KIND, "claim_state": state})
    return rows


def resolve_site(trace: Trace, site: str) -> Op | None:
    """The op a site string names (label, module path[:call], or module/label), or None."""
    if site in trace:
        return trace[site]
    module, sep, label = site.rpartition("/")
    if sep:
        op = trace[label] if label in trace else None
        return op if op is not None and op.module_address == module else None
    address, _, call_text = site.partition(":")
    scope = trace.modules.get(address)
    if scope is None or not scope.calls:
        return None
    call = int(call_text) if call_text.isdigit() else 0
    for record in scope.calls:
        if record.call == call and record.outputs:
            return trace[record.outputs[0]]
    return None


@dataclass(frozen=True)
class PlanEntry:
    site: str
    label: str | None
    status: str
    site_shape: tuple[int, ...] | None
    site_dtype: str | None
    planned_shape: tuple[int, ...]
    planned_dtype: str

    @property
    def ok(self) -> bool:
        return self.status in (FITS, BROADCASTS)

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "label": self.label, "status": self.status,
                "site_shape": list(self.site_shape) if self.site_shape is not None else None,
                "site_dtype": self.site_dtype, "planned_shape": list(self.planned_shape),
                "planned_dtype": self.planned_dtype}


@dataclass(frozen=True)
class PlanReport:
    """Per-entry audit of a plan, with the ladder state of the trace it was checked against; `refuted` says
    why its shapes cannot be relied on (a discharge contradicted them), and then the plan is not ok."""

    entries: tuple[PlanEntry, ...]
    ladder_state: str
    refuted: str | None = None

    @property
    def ok(self) -> bool:
        return self.refuted is None and all(e.ok for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {"ladder_state": self.ladder_state, "ok": self.ok, "refuted": self.refuted,
                "entries": [e.to_dict() for e in self.entries]}

    def __str__(self) -> str:
        lines = [f"plan check against {self.ladder_state} structure: {'ok' if self.ok else 'PROBLEMS'}"]
        if self.refuted is not None:
            lines.append(f"  the structure is REFUTED, its shapes are not to be relied on: {self.refuted}")
        for e in self.entries:
            lines.append(f"  {e.site}: {e.status} (site {e.site_shape} {e.site_dtype}; "
                         f"planned {e.planned_shape} {e.planned_dtype})")
        return "\n".join(lines)


def audit_plan(trace: Trace, plan: list) -> PlanReport:
    """Check each `(site, tensor)` of `plan`: the site exists and the tensor's shape and dtype fit."""
    if not isinstance(plan, (list, tuple)):
        raise InvalidInputError("a plan is a list of (site, tensor) pairs", site="check_plan(plan)")
    entries = []
    for i, item in enumerate(plan):
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)):
            raise InvalidInputError(f"plan entry {i} is not a (site, tensor) pair", site=f"check_plan(plan[{i}])",
                                    remedy="Write each entry as ('model.layers.0.mlp', torch.empty(..., device='meta')).")
        site, planned = item
        shape, dtype = _planned(planned, i)
        entries.append(_audit_one(trace, site, shape, dtype))
    state = trace.ladder_state
    return PlanReport(entries=tuple(entries), ladder_state=state, refuted=refutation(trace, state))


def refutation(trace: Trace, state: str) -> str | None:
    """Why the trace's shapes are contradicted, in words: its REFUTED discharge's first contradiction, or what
    its file says (REFUTED when saved, not re-verified); None when nothing contradicted them."""
    if state == Ladder.REFUTED:
        record = trace.envelope.discharge or {}
        first = record.get("contradiction")
        return contradiction_text(first) if first else "a real capture contradicted the claims"
    saved = state_when_saved(trace.envelope) if state == Ladder.HYPOTHESIS else None
    if saved is not None and saved["state"] == Ladder.REFUTED:
        return f"REFUTED when saved ({saved.get('at')}), not re-verified in this process; discharge again"
    return None


def _audit_one(trace: Trace, site: str, shape: tuple[int, ...], dtype: str) -> PlanEntry:
    op = resolve_site(trace, site)
    if op is None or op.out is None:
        return PlanEntry(site, None, MISSING, None, None, shape, dtype)
    target = op.out
    if target.dtype != dtype:
        status = DTYPE_MISMATCH
    elif tuple(target.shape) == shape:
        status = FITS
    elif _broadcasts(shape, target.shape):
        status = BROADCASTS
    else:
        status = SHAPE_MISMATCH
    return PlanEntry(site, op.label, status, tuple(target.shape), target.dtype, shape, dtype)


def _planned(planned: Any, i: int) -> tuple[tuple[int, ...], str]:
    if isinstance(planned, torch.Tensor):
        return tuple(planned.shape), str(planned.dtype).replace("torch.", "")
    if isinstance(planned, TensorMeta):
        return tuple(planned.shape), planned.dtype
    raise InvalidInputError(f"plan entry {i} plans a {type(planned).__name__}, not a tensor",
                            site=f"check_plan(plan[{i}])",
                            remedy="Plan with a meta tensor of the intended shape and dtype: torch.empty(shape, device='meta').")


def _broadcasts(planned: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True when `planned` broadcasts to exactly `target` (e.g. a (hidden,) steering vector)."""
    if len(planned) > len(target):
        return False
    for p, t in zip(reversed(planned), reversed(target)):
        if p != t and p != 1:
            return False
    return True
