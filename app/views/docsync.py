"""Talking back to the page safely: changes on the document's next tick under its lock, work in the
background, refusals as readable text."""
from __future__ import annotations

import threading
from typing import Any, Callable

from panel.io.state import set_curdoc

from tracer.errors import TracerError


def call_on_document(doc: Any, fn: Callable[[], Any]) -> None:
    """Run `fn` on `doc`'s next tick when it is being served, otherwise right away."""
    if doc is None or getattr(doc, "session_context", None) is None:
        fn()
        return

    def tick() -> None:
        with set_curdoc(doc):
            fn()

    doc.add_next_tick_callback(tick)


def refusal_text(exc: BaseException) -> str:
    """A refusal as a person reads it: what, where, what to do (never a traceback)."""
    if isinstance(exc, TracerError):
        text = f"**Refused** `{exc.code}`: {exc.message}."
        if exc.site:
            text += f" (at {exc.site})"
        if exc.remedy:
            text += f"\n\n**What to do:** {exc.remedy}"
        return text
    return f"**Failed**: {type(exc).__name__}: {exc}"


def run_in_background(doc: Any, work: Callable[[], Any], done: Callable[[Any], None],
                      failed: Callable[[BaseException], None]) -> threading.Thread:
    """Run `work` on a daemon thread; deliver its result or error on the document's next tick."""
    def deliver(fn: Callable[[], None]) -> None:
        call_on_document(doc, fn)

    def body() -> None:
        try:
            result = work()
        except BaseException as exc:  # delivered as a readable refusal
            error = exc
            deliver(lambda: failed(error))
            return
        deliver(lambda: done(result))

    thread = threading.Thread(target=body, name="tlx-discharge", daemon=True)
    thread.start()
    return thread
