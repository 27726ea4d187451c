"""The view kept in the page's URL: what is open beyond the default view, the selected op, the last
search and folding, so a copied link reopens the same view. Unknown or stale entries are ignored."""
from __future__ import annotations

from typing import Any, Mapping

from .state import ExplorerState

KEYS = ("open", "closed", "sel", "q", "fold")


def view_query(state: ExplorerState) -> dict[str, str]:
    """The URL query of `state`'s view, as the difference from its default view (short links)."""
    default = state.engine.default_expansion() | {""}
    query = {
        "open": ",".join(sorted(state.expanded - default)),
        "closed": ",".join(sorted(default - state.expanded)),
        "sel": state.selected,
        "q": state.query,
        "fold": "" if state.fold_repeats == state.default_fold else ("1" if state.fold_repeats else "0"),
    }
    return {k: v for k, v in query.items() if v}


def apply_query(state: ExplorerState, query: Mapping[str, str]) -> list[str]:
    """Restore a view from a URL query; returns the entries that named nothing in this trace."""
    ignored: list[str] = []
    known = state.engine.knows  # a module address, or one call of it (`block#2`)
    opened = [a for a in _split(query.get("open", "")) if known(a) or ignored.append(f"open={a}")]
    closed = [a for a in _split(query.get("closed", "")) if known(a) or ignored.append(f"closed={a}")]
    if query.get("fold") in ("0", "1"):
        state.fold_repeats = query["fold"] == "1"
    if opened or closed:
        state.expanded = (state.expanded | set(opened)) - set(closed) | {""}
    sel = query.get("sel", "")
    if sel and sel in state.trace:
        state.select_op(sel)
    elif sel:
        ignored.append(f"sel={sel}")
    if query.get("q"):
        state.query = query["q"]
    if ignored:
        state.message = "The link names what this trace does not have: " + ", ".join(ignored)[:300] + "."
    return ignored


def _split(text: str) -> list[str]:
    return [a for a in text.split(",") if a]


def session_query() -> dict[str, str]:
    """The served session's URL query (first value of each known key), else {}."""
    import panel as pn

    args: Any = getattr(pn.state, "session_args", None) or {}
    out = {}
    for k in KEYS:
        v = args.get(k)
        if v:
            first = v[0]
            out[k] = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
    return out


def keep_in_url(state: ExplorerState) -> None:
    """Write the view into the served page's URL whenever it changes (nothing when not served)."""
    import panel as pn

    location = getattr(pn.state, "location", None)
    if location is None:
        return

    def write(*_events: Any) -> None:
        from urllib.parse import urlencode

        search = ("?" + urlencode(view_query(state))) if view_query(state) else ""
        if location.search != search:
            location.search = search

    state.param.watch(write, ["expanded", "selected", "query", "fold_repeats"])
