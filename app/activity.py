"""Which sessions are waiting on the server: a clock of the pages' messages, so that work nobody waits
for (a page's later parts, the next page built ahead, collecting garbage) steps aside while another
session's click is being answered.

Every message a page sends arrives through Bokeh's websocket handler; `install()` wraps it once to
note, per session, when its latest message arrived and whether one is still being handled. A
session counts as waiting from its message until `RECENT_S` after the handler returned: the change
it made runs its Panel callbacks and sends the answer within that time on an idle server.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

RECENT_S = 0.35  # a session counts as waiting this long after its latest message was handled
clock: Callable[[], float] = time.monotonic  # the clock of the pages' messages (tests put their own in its place)

_lock = threading.Lock()
_last: dict[str, float] = {}  # session id -> monotonic time its latest message was seen (arrived or handled)
_handling: dict[str, int] = {}  # session id -> messages being handled now
_installed: list[Any] = []  # the handler's original method, once wrapped


def install() -> None:
    """Wrap Bokeh's websocket message handler (once per process) to keep the clock."""
    if _installed:
        return
    from bokeh.server.views.ws import WSHandler

    original = WSHandler.on_message

    async def on_message(self: Any, fragment: Any) -> None:
        with handling(_session_id(self)):
            await original(self, fragment)

    on_message.__doc__ = original.__doc__
    WSHandler.on_message = on_message  # type: ignore[method-assign]
    _installed.append(original)


def uninstall() -> None:
    """Put Bokeh's handler back and forget the clock (tests)."""
    if _installed:
        from bokeh.server.views.ws import WSHandler

        WSHandler.on_message = _installed.pop()  # type: ignore[method-assign]
    with _lock:
        _last.clear()
        _handling.clear()


def note(session: str) -> None:
    """Count `session` as having just sent a message (what the handler does; also for tests)."""
    _mark(session, 0)


@contextlib.contextmanager
def handling(session: str) -> Iterator[None]:
    """`session`'s message is being handled inside this block: it waits on the server however long that takes."""
    _mark(session, +1)
    try:
        yield
    finally:
        _mark(session, -1)


def others_waiting(session: str | None, recent_s: float = RECENT_S) -> bool:
    """True while a session other than `session` has a message being handled or handled within `recent_s`."""
    now = clock()
    with _lock:
        return any(sid != session and (_handling.get(sid) or now - seen < recent_s) for sid, seen in _last.items())


def anyone_waiting(recent_s: float = RECENT_S) -> bool:
    """True while any session has a message being handled or handled within `recent_s`."""
    return others_waiting(None, recent_s)


def wait_until_quiet(max_s: float, step_s: float = 0.1) -> None:
    """Sleep (on a worker thread) while any session waits on the server, at most `max_s` in all."""
    waited = 0.0
    while waited < max_s and anyone_waiting():
        time.sleep(step_s)
        waited += step_s


def session_of(doc: Any) -> str | None:
    """The id of the session serving `doc`, or None outside a served session."""
    context = getattr(doc, "session_context", None)
    return getattr(context, "id", None)


def _session_id(handler: Any) -> str:
    connection = getattr(handler, "connection", None)
    session = getattr(connection, "_session", None)  # None before the connection is acknowledged
    return getattr(session, "id", "") or ""


def _mark(session: str, change: int) -> None:
    now = clock()
    with _lock:
        _last[session] = now
        count = _handling.get(session, 0) + change
        if count > 0:
            _handling[session] = count
        else:
            _handling.pop(session, None)
        if len(_last) > 256:  # closed sessions' entries: drop those quiet for a minute
            for sid in [sid for sid, seen in _last.items() if now - seen > 60 and sid not in _handling]:
                del _last[sid]
