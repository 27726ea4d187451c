"""The size of the view a session asks to draw, and the bounds on it (issue 39, fair sessions).

A session's layout, its Bokeh serialization and its websocket message all ran on the server's one event
loop, so one session drawing a dense graph (11,626 edges: seconds of routing, then seconds of encoding)
held every other session's round trips for that long. Before a view is laid out, `drawn_size` counts
what it would draw from the group tree alone (no placement, no edge routing, which are the cost): the ops drawn
as boxes of their own and the edges into them and into the module boxes (one per drawn source at most).
A view past `MAX_DRAWN_OPS` or `MAX_DRAWN_EDGES` is not laid out; the session keeps the view it had and
says why (`refusal`), whichever action asked for it (a click, a search, a link's view, Expand all,
unfolding). A served view past `OFF_LOOP_OPS` or `OFF_LOOP_EDGES` is laid out on a worker thread
(`app.offloop`); the serialization of what it draws still runs on the loop, which is why the bound stays.
"""
from __future__ import annotations

from typing import Any, Iterable

MAX_DRAWN_OPS = 3_000
# Edges, the cost that matters (routing and encoding grow with them). Measured with bench_sessions.py on
# the dense-edge trace (docs/security.md): at 1,000 another session's round trips while one session opens
# that graph were those of an idle machine (p90 983 vs 1,055 ms at load 16-19); at 3,000 they were 3.4 s.
# So the default Llama expanded whole (2,458 edges) is refused too; its folded default view and each
# layer opened are far below. The count is an upper bound (about 1.5-2x the edges drawn). Rerun with layouts
# off the loop at 3,000 (load 10-17): another session's p90 1,524 ms against 685 ms at 1,000 in the same run,
# the time now in applying the drawn data to the document (Bokeh's validation and encoding, on the loop).
MAX_DRAWN_EDGES = 1_000
# Past these a served session's layout runs on a worker thread, off the loop (`app.offloop`); below them it
# is laid out at once (the dense trace's default view, 121 edges, in about 50 ms; a stage opened, 640, in 20-40).
OFF_LOOP_OPS = 500
OFF_LOOP_EDGES = 500


def drawn_size(engine: Any, expanded: Iterable[str], fold_repeats: bool = False) -> tuple[int, int]:
    """(ops drawn as their own boxes, edges into them) of the view `engine` would lay out for `expanded`.

    Read from the group tree alone (no placement, no routing: it runs on the loop before a layout is sent
    off it): an item of an open group is an op, an open frame (looked into) or a box (a collapsed module, a
    call of a folded loop, a member of a folded run: folding draws fewer boxes but as many sources)."""
    from exporters.layout.calls import call_entries, call_entry
    from exporters.layout.groups import CANVAS

    exp = frozenset(expanded)
    calls = call_entries(exp)
    trace, tree = engine.trace, engine.tree
    ops = edges = 0
    boxes: list[Any] = []
    stack = [CANVAS]
    while stack:
        for item in tree.items(stack.pop()):
            if isinstance(item, str):
                ops += 1
                edges += len(trace[item].parents)
            elif item[0] in exp or (calls and call_entry(*item) in exp):
                stack.append(item)
            else:
                boxes.append(item)
    nodes = ops + len(boxes)  # edges into a box come one per drawn source at most
    edges += sum(min(_entering(engine, key), nodes) for key in boxes)
    return ops, edges


def _entering(engine: Any, key: Any) -> int:
    """Ops outside the group `key` that feed its ops (an upper bound on the edges routed to its box, one
    per source at most), counted once per group and session engine."""
    counts = engine.__dict__.setdefault("_budget_entering", {})
    hit = counts.get(key)
    if hit is None:
        ops = engine.tree.groups[key].all_ops
        inside = {op.label for op in ops}
        hit = counts[key] = len({e.source for op in ops for e in op.parents} - inside)
    return hit


def refusal(engine: Any, expanded: Iterable[str], fold_repeats: bool = False) -> str | None:
    """A readable refusal when the view for `expanded` is past the bounds, else None."""
    return refusal_for(*drawn_size(engine, expanded, fold_repeats))


def refusal_for(ops: int, edges: int) -> str | None:
    """A readable refusal for a view of `ops` drawn ops and `edges` edges past the bounds, else None."""
    if ops <= MAX_DRAWN_OPS and edges <= MAX_DRAWN_EDGES:
        return None
    # What is over and what to do come first: the status line is one line and cuts the end at 1366 px.
    past = [(n, bound, what) for n, bound, what in ((edges, MAX_DRAWN_EDGES, "edges"), (ops, MAX_DRAWN_OPS, "ops"))
            if n > bound]
    counts = " and ".join(f"{n:,} {what}" for n, _b, what in past)
    bounds = " and ".join(f"{bound:,}" for _n, bound, _w in past)
    return (f"Not drawn: {counts}, over the {bounds} drawn at once. Open fewer modules; the view stays as it was "
            f"(a bound, so that other sessions are not held; that view has {ops:,} ops and {edges:,} edges).")


def off_loop(ops: int, edges: int) -> bool:
    """Whether a served session lays a view of this size out on a worker thread (`app.offloop`)."""
    return ops > OFF_LOOP_OPS or edges > OFF_LOOP_EDGES


def say_after_the_action(state: Any, text: str) -> None:
    """Show `text` as `state.message`, also when the action that asked for the view goes on to set its own
    ("Opened X.") after changing the expansion: the next message set in the same action is replaced by
    `text`. The action ends at the session's next tick (or, with no session, at that next message)."""
    state.message = text
    state._view_refusal = text
    if not getattr(state, "_view_refusal_watched", False):
        state._view_refusal_watched = True
        state.param.watch(lambda event: _keep(state, event.new), ["message"])
    try:
        import panel as pn

        doc = pn.state.curdoc
    except Exception:  # noqa: BLE001 - no Panel session
        doc = None
    if doc is not None and getattr(doc, "session_context", None) is not None:
        doc.add_next_tick_callback(lambda: setattr(state, "_view_refusal", None))


def _keep(state: Any, new: str) -> None:
    pending = getattr(state, "_view_refusal", None)
    if pending is not None and new != pending:
        state._view_refusal = None
        state.message = pending
