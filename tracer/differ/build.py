"""`diff(a, b)`: match two traces' ops, modules and parameters, and measure where their values part."""
from __future__ import annotations

import math
from typing import Any

from ..errors import DiffInputError
from ..ir import Trace
from .match import match_ops
from .numeric import op_divergence
from .records import OpDivergence, Side, Tolerance
from .result import TraceDiff
from .structure import merged_tree, module_changes, op_change, op_ref, param_changes


def diff(a: Trace, b: Trace, *, rtol: float = 1e-3, atol: float = 1e-5, describe_a: str = "",
         describe_b: str = "") -> TraceDiff:
    """Compare trace `a` (the reference) with trace `b`: structure always, values where both sides saved them.

    An op diverges when its relative L2 exceeds `rtol` and its max abs difference exceeds `atol`.
    """
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, Trace):
            raise DiffInputError(f"diff() needs two traces; {name} is a {type(value).__name__}", site=f"diff({name}=...)")
    tolerance = checked_tolerance(Tolerance(rtol=_number(rtol, "rtol"), atol=_number(atol, "atol")))
    matching = match_ops(a, b)
    changed = []
    for x, y in matching.pairs:
        change = op_change(x, y)
        if change is not None:
            changed.append(change)
    divergences, note = _divergences(a, b, matching.pairs)
    added_m, removed_m, changed_m = module_changes(a, b)
    added_p, removed_p, changed_p = param_changes(a, b)
    return TraceDiff(
        a=_side(a, describe_a), b=_side(b, describe_b), tolerance=tolerance,
        pairs=tuple((x.label, y.label) for x, y in matching.pairs),
        added_ops=tuple(op_ref(op) for op in matching.added), removed_ops=tuple(op_ref(op) for op in matching.removed),
        changed_ops=tuple(changed), added_modules=added_m, removed_modules=removed_m, changed_modules=changed_m,
        added_params=added_p, removed_params=removed_p, changed_params=changed_p,
        divergences=divergences, values_compared=bool(divergences), values_note=note, modules=merged_tree(a, b))


def checked_tolerance(tolerance: Tolerance) -> Tolerance:
    """`tolerance` when both bounds are finite numbers >= 0; a typed refusal otherwise."""
    for name in ("rtol", "atol"):
        value = getattr(tolerance, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise DiffInputError(f"{name} must be a finite number >= 0, got {value!r}", site=f"diff({name}=...)")
    return tolerance


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DiffInputError(f"{name} must be a number, got {type(value).__name__}", site=f"diff({name}=...)")
    return float(value)


def _side(trace: Trace, description: str) -> Side:
    return Side(model_class=trace.model_class, ladder_state=str(trace.ladder_state),
                structure_only=bool(trace.structure_only), ops=len(trace.ops), values=len(trace.values),
                description=description or _default_description(trace))


def _default_description(trace: Trace) -> str:
    source = trace.provenance.config_source
    kind = "weights-free" if trace.structure_only else ("values saved" if trace.values else "no values saved")
    return f"{trace.model_class} ({kind}{', ' + str(source) if source else ''})"


def _divergences(a: Trace, b: Trace, pairs) -> tuple[tuple[OpDivergence, ...], str]:
    """Numeric distances of matched ops whose values both sides hold, and a sentence on what was compared."""
    missing = [name for name, t in (("a", a), ("b", b)) if t.structure_only or not t.values]
    if missing:
        which = " and ".join(missing)
        return (), f"structure diff only: side {which} holds no values (structure-only or saved with save='none')"
    found = []
    skipped = 0
    va, vb = a.values, b.values
    for x, y in pairs:
        if x.label in va and y.label in vb:
            div = op_divergence(x, y, va[x.label], vb[y.label])
            if div is None:
                skipped += 1
            else:
                found.append(div)
    note = f"values compared on {len(found)} of {len(pairs)} matched ops"
    if skipped:
        note += f" ({skipped} more hold values that cannot be compared: different shapes, meta or non-tensor)"
    if len(found) < len(pairs) - skipped:
        note += "; the other matched ops have no saved value on one side"
    return tuple(found), note
