"""The view kept in the page's URL: what is open beyond the default view, the selected op, the last
search and folding, so a copied link reopens the same view. Unknown or stale entries are ignored, and
a view too large to be a link (`MAX_QUERY_CHARS`, `MAX_ENTRIES`) is ignored whole; either way the status
line says what was ignored and the default view stands."""
from __future__ import annotations

from typing import Any, Mapping

from .state import ExplorerState

KEYS = ("open", "closed", "sel", "q", "fold", "ignored")  # ignored=N: the server dropped a link's N-character view
MAX_QUERY_CHARS = 16_384  # a link's view state beyond this many characters is ignored whole (a view is a few hundred)
MAX_ENTRIES = 1_000  # nor more `open`/`closed` entries than this


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
    """Restore a view from a URL query; returns the entries that named nothing in this trace (one entry
    naming the whole view when it is past `MAX_QUERY_CHARS` or `MAX_ENTRIES`: then nothing is applied)."""
    dropped = str(query.get("ignored", ""))
    if dropped.isdigit():  # the server sent a too-long link here without its view (app.http_guard)
        state.message = (f"The link's view was ignored: {int(dropped):,} characters (at most {MAX_QUERY_CHARS:,}); "
                         f"this is the default view.")
        return [f"view ({int(dropped)} characters)"]
    size = sum(len(str(query.get(k, ""))) for k in KEYS)
    entries = len(_split(query.get("open", ""))) + len(_split(query.get("closed", "")))
    if size > MAX_QUERY_CHARS or entries > MAX_ENTRIES:
        state.message = (f"The link's view was ignored: {size:,} characters and {entries:,} module entries "
                         f"(at most {MAX_QUERY_CHARS:,} and {MAX_ENTRIES:,}); this is the default view.")
        return [f"view ({size} characters, {entries} entries)"]
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
        shown = ", ".join(ignored)
        shown = shown if len(shown) <= 300 else shown[:300] + "\u2026"
        state.message = f"The link names {len(ignored)} entr{'y' if len(ignored) == 1 else 'ies'} this trace does not have (ignored): {shown}."
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
