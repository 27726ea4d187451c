"""The server's heap kept cheap to collect.

Panel runs a full `gc.collect()` on the server's event loop when a session closes, and Python runs
full collections on its own as objects pile up; either walks every object alive, and after loading a
model (torch, transformers, the trace) that is about half a million objects: 1-2 s on a busy 2-core
machine, during which no session gets an answer. Objects alive once the server has loaded its trace
live as long as the server, so they are moved out of the collector's reach.
"""
from __future__ import annotations

import gc
from typing import Any, Callable

from . import activity


def freeze_long_lived() -> int:
    """Collect once, then exempt every object alive now from later collections; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


FULL_EVERY_S = 2  # how often (seconds) a due full collection is looked at
MAX_DEFER_S = 60.0  # a due collection runs after this long even if sessions never stop asking
QUIET_S = 1.0  # no session has waited on the server for this long: a collection now delays nobody
_waiting_since: list[float] = []  # when the collection now waiting for a pause was asked for (`activity.clock`)
# How the next look for a pause is scheduled: (delay_s, callback); None: the current Tornado loop's call_later
# (tests put their own in its place, with a clock of their own in `activity.clock`).
call_later: Callable[[float, Callable[[], None]], Any] | None = None


def collect_when_idle() -> None:
    """While serving, run full collections only when no session waits on the server.

    Python's own full collections are switched off (young and middle generations are still collected
    as usual: milliseconds each); Panel's collection after a closed session, and a full collection
    that falls due as Python counts it, wait until no page has sent a message for `QUIET_S` (at most
    `MAX_DEFER_S`). Called once, in the server's own process, before serving."""
    import panel as pn
    import panel.io.document as panel_document

    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, 1 << 30)
    panel_document._garbage_collect = request_full_collection  # what Panel schedules after a closed session

    def look() -> None:
        if gc.get_count()[2] >= full:  # as many middle collections as Python counts before a full one
            request_full_collection()

    pn.state.schedule_task("tlx-full-collection", look, period=f"{FULL_EVERY_S}s")


def request_full_collection() -> None:
    """A full collection on the server's loop once no session has waited for `QUIET_S` (see above)."""
    if _waiting_since:  # one is already waiting for a pause
        return
    _waiting_since.append(activity.clock())
    _collect_at_a_pause()


def _collect_at_a_pause() -> None:
    if activity.anyone_waiting(QUIET_S) and activity.clock() - _waiting_since[0] < MAX_DEFER_S:
        if call_later is None:
            from tornado.ioloop import IOLoop

            IOLoop.current().call_later(QUIET_S / 4, _collect_at_a_pause)
        else:
            call_later(QUIET_S / 4, _collect_at_a_pause)
        return
    _waiting_since.clear()
    gc.collect()
