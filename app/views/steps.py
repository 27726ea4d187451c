"""Building a page part a little at a time: each piece's Bokeh models are made on its own tick of the
session's document, so the server's loop answers other sessions between the pieces; while another
session waits on an answer, the next piece waits too."""
from __future__ import annotations

from typing import Any

import panel as pn

from ..activity import others_waiting, session_of
from .docsync import call_on_document, is_served


class Built:
    """An item `fill_in_steps` makes only at its tick: `make()` returns it (e.g. a side tab's panel)."""

    def __init__(self, make: Any) -> None:
        self.make = make


def _made(item: Any) -> Any:
    return item.make() if isinstance(item, Built) else item


GIVE_WAY_MS = 40  # a piece waits this long, again and again, while another session waits on the server
MAX_GIVE_WAY_S = 3.0  # after waiting this long in all, the page's pieces are made regardless
PER_STEP = 1  # widgets per tick: 25-50 ms each on an idle 2-core machine, 3-4 times that on a busy one


def fill_in_steps(column: Any, items: list[Any], per_step: int = PER_STEP) -> None:
    """Append `items` to `column` (any Panel list layout, Tabs included), `per_step` of them per tick of
    the current served document (all at once outside a served session). An item that is a `Built`
    is made at its own tick."""
    doc = pn.state.curdoc
    if not is_served(doc):
        column.extend([_made(item) for item in items])
        return
    pending = list(items)
    session, gave_way = session_of(doc), [0.0]

    def step() -> None:
        if gave_way[0] < MAX_GIVE_WAY_S and others_waiting(session):  # another page's click is being answered
            gave_way[0] += GIVE_WAY_MS / 1000
            call_on_document(doc, step, delay_ms=GIVE_WAY_MS)
            return
        column.extend([_made(item) for item in pending[:per_step]])
        del pending[:per_step]
        if pending:
            call_on_document(doc, step)

    call_on_document(doc, step)
