"""`TraceDiff`: everything two traces differ in, as plain data that saves to JSON and renders as text."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from .records import (ModuleEntry, ModuleRollup, OpChange, OpDivergence, OpRef, RecordChange, Side, Tolerance,
                      plain)
from .rollup import first_divergence, module_rollups


class TraceDiff(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The diff of trace `a` against trace `b` (a is the reference).

    `pairs` maps matched op labels (a, b); `divergences` holds the numeric distance of each matched
    op whose values both sides saved (empty, with `values_note` saying why, for a structure diff).
    Roll-ups and the first divergence are derived from these under `tolerance`.
    """

    a: Side
    b: Side
    tolerance: Tolerance
    pairs: tuple[tuple[str, str], ...]
    added_ops: tuple[OpRef, ...]
    removed_ops: tuple[OpRef, ...]
    changed_ops: tuple[OpChange, ...]
    added_modules: tuple[str, ...]
    removed_modules: tuple[str, ...]
    changed_modules: tuple[RecordChange, ...]
    added_params: tuple[str, ...]
    removed_params: tuple[str, ...]
    changed_params: tuple[RecordChange, ...]
    divergences: tuple[OpDivergence, ...]
    values_compared: bool
    values_note: str
    modules: dict[str, ModuleEntry]

    # -- derived ------------------------------------------------------------------
    @property
    def structure_changed(self) -> bool:
        """True when any op, module or parameter was added, removed or changed."""
        return any((self.added_ops, self.removed_ops, self.changed_ops, self.added_modules, self.removed_modules,
                    self.changed_modules, self.added_params, self.removed_params, self.changed_params))

    @property
    def first_divergence(self) -> OpDivergence | None:
        """The first op on side a whose values part beyond the tolerance (None when none does)."""
        return first_divergence(self.divergences, self.tolerance)

    @property
    def diverged(self) -> tuple[OpDivergence, ...]:
        """Every compared op beyond the tolerance, in side a's order."""
        return tuple(d for d in self.divergences if d.diverged(self.tolerance))

    @property
    def is_empty(self) -> bool:
        """True when the structure is the same and no compared value parts beyond the tolerance."""
        return not self.structure_changed and self.first_divergence is None

    def rollups(self) -> dict[str, ModuleRollup]:
        """Per module: ops added/removed/changed/beyond tolerance, worst op, its output's divergence."""
        return module_rollups(self)

    def divergent_modules(self) -> list[ModuleRollup]:
        """Modules with a structural change or an op beyond tolerance, most divergent first.

        Inside an added or removed subtree only its top module is listed.
        """
        parent = {child: address for address, entry in self.modules.items() for child in entry.children}

        def inside_same_change(row: ModuleRollup) -> bool:
            up = parent.get(row.address)
            return row.status != "matched" and up is not None and self.modules[up].status == row.status

        rows = [r for r in self.rollups().values() if r.divergent and not inside_same_change(r)]
        return sorted(rows, key=ModuleRollup.sort_key)

    def with_tolerance(self, rtol: float | None = None, atol: float | None = None) -> "TraceDiff":
        """This diff judged under another tolerance (nothing is recomputed from values)."""
        from .build import checked_tolerance

        tol = checked_tolerance(Tolerance(rtol=self.tolerance.rtol if rtol is None else rtol,
                                          atol=self.tolerance.atol if atol is None else atol))
        return msgspec.structs.replace(self, tolerance=tol)

    # -- renderings -----------------------------------------------------------------
    def to_text(self, *, max_depth: int | None = None, top: int = 10) -> str:
        """A folded module tree like `summary()`, divergent modules first."""
        from .render import render_diff

        return render_diff(self, max_depth=max_depth, top=top)

    def __str__(self) -> str:
        return self.to_text()

    def to_dict(self) -> dict[str, Any]:
        """This diff as JSON-able builtins (with the derived first divergence and roll-ups)."""
        data = plain(self)
        first = self.first_divergence
        data["first_divergence"] = plain(first) if first else None
        data["structure_changed"] = self.structure_changed
        data["rollups"] = {a: plain(r) for a, r in self.rollups().items()}
        return data

    def to_json(self) -> str:
        import json

        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def save(self, path: str | Path) -> Path:
        """Write this diff to the JSON file `path` (versioned, with a digest); returns the path."""
        from .store import save_diff

        return save_diff(self, path)

    def __repr__(self) -> str:
        first = self.first_divergence
        where = f", first divergence {first.label_a} in {first.module or '(root)'}" if first else ""
        return (f"<TraceDiff {self.a.model_class} vs {self.b.model_class}: {len(self.pairs)} matched, "
                f"+{len(self.added_ops)} -{len(self.removed_ops)} ~{len(self.changed_ops)} ops{where}>")
