"""A trace diff as per-op numbers and words on one side's graph: what every diff view draws.

Each op of the drawn side scores its relative L2 against its match (0 = equal, at most 2); an op
added, removed, or changed in function, shape or parameters scores `STRUCTURAL` (the top of the
scale); a matched op without values on both sides scores 0 when unchanged. The figure, the Model
Explorer node data and the app's Compare tab all read these.
"""
from __future__ import annotations

from tracer.differ import TraceDiff

STRUCTURAL = 2.0  # relative L2 is at most 2: structural changes sit at the top of the same scale
TITLE = "divergence (rel L2 per op; 2 = added, removed or changed)"


def drawn_side(diff: TraceDiff) -> str:
    """The side a single-graph view draws: b when ops were added (they exist only there), else a."""
    return "b" if diff.added_ops else "a"


def divergence_scores(diff: TraceDiff, side: str = "a", *, beyond_only: bool = False) -> dict[str, float]:
    """`{op label on side: score}` (see module docstring); `beyond_only` scores ops within the tolerance 0."""
    first = 0 if side == "a" else 1
    scores = {pair[first]: 0.0 for pair in diff.pairs}
    by_a = {d.label_a: d for d in diff.divergences}
    for pair in diff.pairs:
        found = by_a.get(pair[0])
        if found is not None and (not beyond_only or found.diverged(diff.tolerance)):
            scores[pair[first]] = found.rel_l2
    for change in diff.changed_ops:
        if not change.dtype_only:
            scores[change.label_a if side == "a" else change.label_b] = STRUCTURAL
    for ref in (diff.removed_ops if side == "a" else diff.added_ops):
        scores[ref.label] = STRUCTURAL
    return scores


def op_notes(diff: TraceDiff, side: str = "a") -> dict[str, str]:
    """`{op label on side: a short sentence}`: its match and distance, or how it changed, or that it is new/gone."""
    index = 0 if side == "a" else 1
    other = {pair[index]: pair[1 - index] for pair in diff.pairs}
    by_a = {d.label_a: d for d in diff.divergences}
    notes = {label: f"matched {match}" for label, match in other.items()}
    for pair in diff.pairs:
        found = by_a.get(pair[0])
        if found is not None:
            beyond = " (beyond tolerance)" if found.diverged(diff.tolerance) else ""
            notes[pair[index]] = (f"matched {pair[1 - index]}: rel L2 {found.rel_l2:.3g}, max abs {found.max_abs:.3g}, "
                                  f"cosine {found.cosine:.6f}{beyond}")
    for change in diff.changed_ops:
        label = change.label_a if side == "a" else change.label_b
        what = "; ".join(f"{c.field} {c.a} -> {c.b}" for c in change.changes)
        notes[label] = f"{notes.get(label, 'matched')}; changed: {what}"
    for ref in (diff.removed_ops if side == "a" else diff.added_ops):
        notes[ref.label] = "only in a (removed in b)" if side == "a" else "only in b (added)"
    return notes


def diff_caption(diff: TraceDiff, side: str | None = None) -> str:
    """What was compared, for a figure or a page: both sides, the tolerance and the first divergence."""
    side = side or drawn_side(diff)
    first = diff.first_divergence
    parts = [f"Diff of a: {diff.a.description} [{diff.a.ladder_state}] against b: {diff.b.description} "
             f"[{diff.b.ladder_state}]; drawn: side {side}.",
             f"{len(diff.pairs):,} ops matched, {len(diff.added_ops):,} added, {len(diff.removed_ops):,} removed, "
             f"{len(diff.changed_ops):,} changed."]
    if diff.values_compared:
        parts.append(f"Colour: relative L2 per op, modules by their worst op; 2 marks added, removed or changed ops. "
                     f"Tolerance rel L2 {diff.tolerance.rtol:g}, max abs {diff.tolerance.atol:g}; first divergence: "
                     + (f"{first.label_a} in {first.module or '(root)'} (rel L2 {first.rel_l2:.3g})." if first else "none."))
    else:
        parts.append(f"Colour: 2 marks added, removed or changed ops; {diff.values_note}.")
    return " ".join(parts)
