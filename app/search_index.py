"""Op search over a long trace at the speed of one string scan: every op's label and module path,
lower-cased, in one text; a query's occurrences are found by `str.find` and mapped back to ops."""
from __future__ import annotations

from bisect import bisect_right
from typing import Any


class SearchIndex:
    """Each op's `label<TAB>module` (lower case) on its own line, in execution order."""

    def __init__(self, ops: Any) -> None:
        self.rows = tuple((op.label.lower(), (op.module or "").lower()) for op in ops)
        self.text = "\n".join(f"{label}\t{module}" for label, module in self.rows)
        starts, at = [], 0
        for label, module in self.rows:
            starts.append(at)
            at += len(label) + len(module) + 2
        self.starts = starts

    def matching(self, q: str) -> list[int]:
        """Positions (in execution order) of the ops whose label or module path contains `q`; all for ''."""
        if not q:
            return list(range(len(self.rows)))
        if "\t" in q or "\n" in q:
            return []
        found: list[int] = []
        last, find, at = -1, self.text.find, 0
        while True:
            at = find(q, at)
            if at < 0:
                return found
            row = bisect_right(self.starts, at) - 1
            if row != last:
                found.append(row)
                last = row
            at = self.starts[row + 1] if row + 1 < len(self.starts) else len(self.text)  # the next op's line
