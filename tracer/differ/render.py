"""A diff as text: a header, the divergent modules first, then the merged module tree folded like `summary()`."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .records import ModuleRollup

if TYPE_CHECKING:
    from .result import TraceDiff

_INDEXED = re.compile(r"^(.*?)(\d+)$")
_MARK = {"added": "+ ", "removed": "- ", "matched": ""}
_MAX_INDENT = 32


def render_diff(diff: "TraceDiff", *, max_depth: int | None = None, top: int = 10) -> str:
    """The text rendering of `diff` (see module docstring)."""
    rollups = diff.rollups()
    lines = [f"diff  a: {diff.a.description} [{diff.a.ladder_state}]",
             f"      b: {diff.b.description} [{diff.b.ladder_state}]",
             f"  ops: {len(diff.pairs):,} matched, {len(diff.added_ops):,} added, {len(diff.removed_ops):,} removed, "
             f"{len(diff.changed_ops):,} changed · modules: +{len(diff.added_modules)} -{len(diff.removed_modules)} "
             f"~{len(diff.changed_modules)} · params: +{len(diff.added_params)} -{len(diff.removed_params)} "
             f"~{len(diff.changed_params)}"]
    tol = diff.tolerance
    if diff.values_compared:
        lines.append(f"  values: {diff.values_note}; {len(diff.diverged):,} beyond tolerance "
                     f"(rel L2 > {tol.rtol:g} and max abs > {tol.atol:g})")
        first = diff.first_divergence
        lines.append(f"  first divergence: {_op_line(first)}" if first else "  first divergence: none")
    else:
        lines.append(f"  values: {diff.values_note}")
    if diff.is_empty:
        lines.append("  no differences")
    divergent = diff.divergent_modules()
    if divergent:
        lines.append("divergent modules (most first):")
        for row in divergent[:top]:
            lines.append(f"  {_MARK[row.status]}{row.address or '(root)'}: {row.class_name}  {row.describe()}")
        if len(divergent) > top:
            lines.append(f"  ... and {len(divergent) - top} more")
    root = diff.modules.get("")
    if root is not None:
        lines.append(f"tree: {root.class_name}  {rollups[''].describe()}")
        _render_tree(diff, rollups, max_depth, lines)
    for change in diff.changed_ops[:top]:
        fields = "; ".join(f"{c.field} {c.a} -> {c.b}" for c in change.changes)
        lines.append(f"  changed op {change.label_a} ({change.module or '(root)'}): {fields}")
    for change in diff.changed_params[:top]:
        fields = "; ".join(f"{c.field} {c.a} -> {c.b}" for c in change.changes)
        lines.append(f"  changed param {change.address}: {fields}")
    return "\n".join(lines)


def _op_line(div) -> str:
    return (f"{div.label_a} ({div.func} in {div.module or '(root)'}) rel L2 {div.rel_l2:.3g}, max abs "
            f"{div.max_abs:.3g}, cosine {div.cosine:.6f}" + _non_finite(div))


def _non_finite(div) -> str:
    if div.non_finite_a or div.non_finite_b:
        return f", non-finite {div.non_finite_a} vs {div.non_finite_b}"
    return ""


def _render_tree(diff: "TraceDiff", rollups: dict[str, ModuleRollup], max_depth: int | None, lines: list[str]) -> None:
    """One line per module (or folded run of equal siblings), divergent runs first, depth first without recursion."""
    stack: list = [("", "", 1)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            lines.append(item)
            continue
        address, prefix, depth = item
        if max_depth is not None and depth > max_depth:
            continue
        runs = _runs(diff, rollups, diff.modules[address].children)
        runs.sort(key=lambda run: min(rollups[a].sort_key() for a in run))
        for i in reversed(range(len(runs))):
            run = runs[i]
            branch, extend = ("└─ ", "   ") if i == len(runs) - 1 else ("├─ ", "│  ")
            shown = min(run, key=lambda a: rollups[a].sort_key())  # the run's most divergent member
            first, last = diff.modules[run[0]], diff.modules[run[-1]]
            name = _name(first.address) if len(run) == 1 else f"{_name(first.address)}-{_name(last.address)}"
            times = f" x{len(run)}" if len(run) > 1 else ""
            which = f" (worst {_name(shown)})" if len(run) > 1 and rollups[shown].divergent else ""
            deep = depth >= _MAX_INDENT
            stack.append((shown, prefix if deep else prefix + extend, depth + 1))
            stack.append(f"  {prefix}{branch}{_MARK[first.status]}{name}: {first.class_name}{times}{which}  "
                         f"{rollups[shown].describe()}")


def _runs(diff: "TraceDiff", rollups: dict[str, ModuleRollup], children: tuple[str, ...]) -> list[list[str]]:
    """Consecutive numbered siblings of one class and status folded together (h.0 ... h.11)."""
    runs: list[list[str]] = []
    for child in children:
        if runs and _same_run(diff, rollups, runs[-1][-1], child):
            runs[-1].append(child)
        else:
            runs.append([child])
    return runs


def _same_run(diff: "TraceDiff", rollups: dict[str, ModuleRollup], a: str, b: str) -> bool:
    ma, mb = _INDEXED.match(a), _INDEXED.match(b)
    if not (ma and mb) or ma.group(1) != mb.group(1):
        return False
    x, y = diff.modules[a], diff.modules[b]
    return x.class_name == y.class_name and x.status == y.status and rollups[a].structural == rollups[b].structural


def _name(address: str) -> str:
    return address.rsplit(".", 1)[-1] if address else "(root)"
