"""Talking back to the page safely: changes on the document's next tick under its lock, work in the
background (cancellable, one job at a time per panel), and every text shown escaped."""
from __future__ import annotations

import asyncio
import html
import threading
from typing import Any, Callable

from panel.io.state import set_curdoc

from tracer.errors import TracerError

Report = Callable[[float, str], None]


class Cancelled(Exception):
    """Raised inside background work at its next step once the user pressed Cancel."""


def is_served(doc: Any) -> bool:
    """Whether `doc` is the document of a served session (else code runs outside a server: tests, notebooks)."""
    return doc is not None and getattr(doc, "session_context", None) is not None


def call_on_document(doc: Any, fn: Callable[[], Any], delay_ms: int = 0) -> None:
    """Run `fn` on `doc`'s next tick (or `delay_ms` later) when it is being served, otherwise right away.

    Safe from any thread: off the server's loop the callback is handed to the loop first, and the loop puts
    it on the document. A Bokeh document is not thread-safe: `add_next_tick_callback` from another thread
    while the loop holds the document ("combine", as Panel does around its changes) can add the callback's
    event to the held list just as the loop releases it, and the session never learns of the callback (a
    result that never reached the page, seen under load; 1 in 1,000-3,000 with a 1 us switch interval)."""
    if not is_served(doc):
        fn()
        return

    def tick() -> None:
        with set_curdoc(doc):
            fn()

    def schedule() -> None:
        if getattr(doc.session_context, "destroyed", False):  # the page closed meanwhile: nobody to tell
            return
        if delay_ms:
            doc.add_timeout_callback(tick, delay_ms)
        else:
            doc.add_next_tick_callback(tick)

    loop = serving_loop(doc)
    if loop is None or on_loop(loop):
        schedule()
    else:
        loop.add_callback(schedule)  # Tornado's one thread-safe entry


def serving_loop(doc: Any) -> Any:
    """The Tornado loop that serves `doc`'s session, or None where none is known (a test's stand-in)."""
    server = getattr(doc.session_context, "server_context", None)
    application = getattr(server, "application_context", None)
    return getattr(application, "io_loop", None)


def on_loop(loop: Any) -> bool:
    """Whether this thread is the one running Tornado `loop`."""
    try:
        return asyncio.get_running_loop() is loop.asyncio_loop
    except RuntimeError:  # no loop runs on this thread
        return False


def refusal_text(exc: BaseException) -> str:
    """A refusal as a person reads it: what, where, what to do (plain text, never a traceback)."""
    if isinstance(exc, TracerError):
        text = f"Refused [{exc.code}]: {exc.message}."
        if exc.site:
            text += f" (at {exc.site})"
        if exc.remedy:
            text += f"\n\nWhat to do: {exc.remedy}"
        return text
    return f"Failed: {type(exc).__name__}: {exc}"


def text_html(text: str, *, strong: str = "") -> str:
    """Plain `text` for an HTML pane: escaped, line breaks kept; `strong` is a bold lead-in."""
    lead = f"<b>{html.escape(strong)}</b> " if strong else ""
    return (f'<div class="tlx-text" style="white-space:pre-wrap;overflow-wrap:anywhere;font:13px sans-serif">'
            f"{lead}{html.escape(text)}</div>")


def refusal_html(exc: BaseException) -> str:
    """A refusal for an HTML pane: its text escaped (paths and file content never become markup)."""
    return text_html(refusal_text(exc))


def run_in_background(doc: Any, work: Callable[[], Any], done: Callable[[Any], None],
                      failed: Callable[[BaseException], None], name: str = "tlx-work") -> threading.Thread:
    """Run `work` on a daemon thread; deliver its result or error on the document's next tick."""
    def body() -> None:
        try:
            result = work()
        except BaseException as exc:  # delivered as a readable refusal
            error = exc
            call_on_document(doc, lambda: failed(error))
            return
        call_on_document(doc, lambda: done(result))

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


class BackgroundJob:
    """One panel's background work: at most one run at a time, progress reported, cancellable.

    `work(report)` runs on a thread and calls `report(fraction, text)` between its steps; after
    `cancel()` the next `report` raises `Cancelled` and the run's result is dropped. `progress`,
    `done` and `failed` are applied on the session's own document (its next tick).
    """

    def __init__(self, doc: Any, progress: Callable[[float, str], None], name: str = "tlx-work") -> None:
        self.doc = doc
        self.progress = progress
        self.name = name
        self._run = 0
        self._cancel: threading.Event | None = None
        self.thread: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        return self._cancel is not None

    def start(self, work: Callable[[Report], Any], done: Callable[[Any], None],
              failed: Callable[[BaseException], None]) -> threading.Thread | None:
        """Start `work` unless a run is in progress (then nothing happens and None is returned)."""
        if self.busy:
            return None
        self._run += 1
        run, cancel = self._run, threading.Event()
        self._cancel = cancel

        def report(frac: float, text: str) -> None:
            if cancel.is_set():
                raise Cancelled(text)
            self._deliver(run, lambda: self.progress(frac, text))

        report.is_cancelled = cancel.is_set  # type: ignore[attr-defined]  # for work that polls (a child process)

        def finish(fn: Callable[[], None]) -> Callable[[], None]:
            def apply() -> None:
                if run == self._run and not cancel.is_set():
                    self._cancel = None
                    fn()
            return apply

        def body() -> None:
            try:
                result = work(report)
            except BaseException as exc:  # delivered as a readable refusal
                error = exc
                call_on_document(self.doc, finish(lambda: failed(error)))
                return
            call_on_document(self.doc, finish(lambda: done(result)))

        self.thread = threading.Thread(target=body, name=self.name, daemon=True)
        self.thread.start()
        return self.thread

    def cancel(self) -> bool:
        """Stop the run at its next step and drop its result; True when a run was cancelled."""
        if self._cancel is None:
            return False
        self._cancel.set()
        self._cancel = None
        return True

    def _deliver(self, run: int, fn: Callable[[], None]) -> None:
        call_on_document(self.doc, lambda: fn() if run == self._run else None)
