"""Op search over a long trace at the speed of one string scan: every op's label, kind, function name
and module path, lower-cased, in one text; a query's occurrences (and its aliases',
`exporters.search_terms`) are found by `str.find`, mapped back to ops and ranked."""
from __future__ import annotations

from bisect import bisect_right
from typing import Any

from exporters.search_terms import rank, terms


def func_name(func: str) -> str:
    """The last part of an op's function path: `torch.nn.functional.linear` -> `linear`."""
    return (func or "").rsplit(".", 1)[-1]


class SearchIndex:
    """Each op's `label<TAB>kind<TAB>function<TAB>module` on its own line, in execution order."""

    def __init__(self, ops: Any) -> None:
        self.fields = tuple((op.label, op.kind, func_name(op.func), op.module or "") for op in ops)
        self.rows = tuple((label.lower(), module.lower()) for label, _k, _f, module in self.fields)
        lines = ["\t".join(f).lower() for f in self.fields]
        self.text = "\n".join(lines)
        starts, at = [], 0
        for line in lines:
            starts.append(at)
            at += len(line) + 1
        self.starts = starts

    def matching(self, q: str) -> list[int]:
        """Positions (in execution order) of the ops whose label, kind, function or module path contains
        `q` (lower case); all for ''."""
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

    def ranked(self, q: str) -> list[tuple[tuple[int, float], int]]:
        """(rank, position) of every op matching `q` or one of its aliases (`search_terms.rank`)."""
        if not q or "\t" in q or "\n" in q:
            return []
        rows = set(self.matching(q))
        for t in terms(q):
            rows.update(self.matching(t))
        out = []
        for i in sorted(rows):
            label, kind, func, module = self.fields[i]
            r = rank(q, label, (kind, func), module)
            if r[0] < 99:
                out.append((r, i))
        return out
