"""Changing live Bokeh models safely: on the document's next tick, under its lock."""
from __future__ import annotations

from typing import Any, Callable

from panel.io.state import set_curdoc


def call_on_document(doc: Any, fn: Callable[[], Any]) -> None:
    """Run `fn` on `doc`'s next tick when it is being served, otherwise right away."""
    if doc is None or getattr(doc, "session_context", None) is None:
        fn()
        return

    def tick() -> None:
        with set_curdoc(doc):
            fn()

    doc.add_next_tick_callback(tick)
