"""Per-module roll-ups of a diff: ops added/removed/changed/diverged under each module, its worst op,
and the divergence of the module's own output."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .records import ModuleRollup, OpDivergence, Tolerance

if TYPE_CHECKING:
    from .result import TraceDiff


def module_rollups(diff: "TraceDiff") -> dict[str, ModuleRollup]:
    """Every module of the merged tree with its share of `diff` (see ModuleRollup)."""
    memo: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _scope(scope: tuple[str, ...]) -> tuple[str, ...]:
        if scope not in memo:
            memo[scope] = _enclosing(scope)
        return memo[scope]

    counts: dict[str, dict[str, int]] = {a: {"ops_added": 0, "ops_removed": 0, "ops_changed": 0, "ops_retyped": 0,
                                              "ops_compared": 0, "ops_diverged": 0} for a in diff.modules}
    worst: dict[str, OpDivergence] = {}
    for name, records in (("ops_added", diff.added_ops), ("ops_removed", diff.removed_ops),
                          ("ops_changed", diff.changed_ops)):
        for rec in records:
            name_here = "ops_retyped" if name == "ops_changed" and rec.dtype_only else name
            for address in _scope(rec.scope):
                if address in counts:
                    counts[address][name_here] += 1
    by_label: dict[str, OpDivergence] = {}
    for div in diff.divergences:
        by_label[div.label_a] = div
        beyond = div.diverged(diff.tolerance)
        for address in _scope(div.scope):
            row = counts.get(address)
            if row is None:
                continue
            row["ops_compared"] += 1
            row["ops_diverged"] += beyond
            if address not in worst or div.rel_l2 > worst[address].rel_l2:
                worst[address] = div
    out: dict[str, ModuleRollup] = {}
    for address, entry in diff.modules.items():
        top = worst.get(address)
        output = _worst_output(entry.outputs_a, by_label)
        out[address] = ModuleRollup(
            address=address, class_name=entry.class_name, status=entry.status, **counts[address],
            worst_op=top.label_a if top else None, worst_rel_l2=top.rel_l2 if top else 0.0,
            worst_max_abs=top.max_abs if top else 0.0,
            output_rel_l2=output.rel_l2 if output else None, output_max_abs=output.max_abs if output else None,
            output_cosine=output.cosine if output else None)
    return out


def first_divergence(divergences: tuple[OpDivergence, ...], tolerance: Tolerance) -> OpDivergence | None:
    """The first op (in side a's order) that parts beyond `tolerance`."""
    return next((d for d in divergences if d.diverged(tolerance)), None)


def _enclosing(scope: tuple[str, ...]) -> tuple[str, ...]:
    """The modules an op ran inside: its call stack, plus each address's dotted parents (a ModuleList
    that is never called itself still holds its blocks), root first."""
    found = dict.fromkeys(("",))
    for address in scope:
        parts = address.split(".") if address else []
        for i in range(1, len(parts) + 1):
            found[".".join(parts[:i])] = None
    return tuple(found)


def _worst_output(labels: tuple[str, ...], by_label: dict[str, OpDivergence]) -> OpDivergence | None:
    found = [by_label[label] for label in labels if label in by_label]
    return max(found, key=lambda d: d.rel_l2) if found else None
