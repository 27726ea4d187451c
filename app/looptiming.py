"""Where the server's event loop spends its time: every loop callback that runs longer than a
threshold is logged (to the `tlx.timing` logger and, when `TLX_LOOP_LOG` names a file, as one JSON
line there) with what the loop thread was executing, sampled while it ran.

Off unless `install()` is called (the two-session benchmark starts its server with it). A sampler
thread wakes every `SAMPLE_S`; while one callback has run longer than `SAMPLE_AFTER_S` it records
the loop thread's innermost project frames. The same thread notes when it woke late (another
thread of this process held the interpreter, or the machine was busy): a "late" record. Each full
garbage collection over the threshold is a "gc" record (whichever thread ran it).
"""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections import Counter
from typing import Any, Callable

TIMING = logging.getLogger("tlx.timing")
SAMPLE_S = 0.01
SAMPLE_AFTER_S = 0.02
LATE_S = 0.1  # the sampler woke this much later than asked: recorded
PROJECT = ("app/", "exporters/", "tracer/")
ROOTS = ("app/", "exporters/", "tracer/", "panel/", "bokeh/", "param/", "tornado/", "asyncio/", "json/")

clock: Callable[[], float] = time.perf_counter  # how long a callback or collection took (tests put their own in its place)
_state: dict[str, Any] = {}
_lock = threading.Lock()


def install(threshold_s: float = 0.05, path: str | None = None) -> None:
    """Time every callback of the asyncio loop(s) of this process; log those over `threshold_s`."""
    if _state.get("on"):
        return
    _state.update(on=True, threshold=threshold_s, path=path or os.environ.get("TLX_LOOP_LOG") or "", running={}, samples={})
    original = asyncio.events.Handle._run

    def timed_run(handle: asyncio.events.Handle) -> None:
        me = threading.get_ident()
        if me in _state["running"]:  # a loop run inside a callback: the outer callback keeps the timing
            return original(handle)
        started = clock()
        _state["running"][me] = started
        try:
            return original(handle)
        finally:
            took = clock() - started
            with _lock:
                _state["running"].pop(me, None)
                samples = _state["samples"].pop(me, None) or Counter()
            if took >= _state["threshold"]:
                _record({"kind": "callback", "end": time.time(), "took_s": round(took, 4),
                         "callback": _describe(handle), "stacks": samples.most_common(6)})

    asyncio.events.Handle._run = timed_run
    _state["original"] = original
    gc.callbacks.append(_on_gc)
    threading.Thread(target=_sample, name="tlx-loop-sampler", daemon=True).start()


def uninstall() -> None:
    """Stop timing (the sampler thread ends at its next wake-up)."""
    if _state.get("on"):
        asyncio.events.Handle._run = _state["original"]
        _state.update(on=False, path="")
        if _on_gc in gc.callbacks:
            gc.callbacks.remove(_on_gc)


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    """Record each full (generation 2) collection that took longer than the threshold, with its thread."""
    if info.get("generation") != 2:
        return
    if phase == "start":
        _state["gc_start"] = clock()
        return
    took = clock() - _state.pop("gc_start", clock())
    if took >= _state.get("threshold", 1.0):
        _record({"kind": "gc", "end": time.time(), "took_s": round(took, 4), "collected": info.get("collected"),
                 "thread": threading.current_thread().name, "frozen": gc.get_freeze_count()})


def _describe(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    coro = getattr(owner, "get_coro", lambda: None)()  # a Task's step: name its coroutine
    if coro is not None:
        return f"task {getattr(coro, '__qualname__', coro)}"
    return getattr(callback, "__qualname__", repr(callback))[:200]


def _sample() -> None:
    while _state.get("on"):
        asked = clock()
        time.sleep(SAMPLE_S)
        late = clock() - asked - SAMPLE_S
        if late >= LATE_S:
            _record({"kind": "late", "end": time.time(), "took_s": round(late, 4), "threads": _busy_threads()})
        now = clock()
        long_running = [(ident, t) for ident, t in list(_state["running"].items()) if now - t >= SAMPLE_AFTER_S]
        if not long_running:
            continue
        frames = sys._current_frames()
        for ident, started in long_running:
            if ident not in frames:
                continue
            where = _project_frames(frames[ident])
            with _lock:
                if _state["running"].get(ident) == started:
                    _state["samples"].setdefault(ident, Counter())[where] += 1


def _project_frames(frame: Any, depth: int = 3) -> str:
    """`frame`'s stack, innermost first: its `depth` innermost frames in the serving libraries or the
    project, then (after "|") its `depth` innermost frames in the project itself."""
    inner, own = [], []
    for summary in reversed(traceback.extract_stack(frame, limit=80)):
        path = summary.filename.replace(os.sep, "/")
        root = next((r for r in ROOTS if f"/{r}" in path), None)
        if root is None or path.endswith("app/looptiming.py"):
            continue
        where = f"{root}{path.rsplit('/' + root, 1)[1]}:{summary.lineno} {summary.name}"
        if len(inner) < depth:
            inner.append(where)
        if root in PROJECT and len(own) < depth:
            own.append(where)
        if len(own) >= depth:
            break
    return " < ".join(inner) + " | " + " < ".join(own)


def _busy_threads() -> list[str]:
    """The names of this process's threads other than the loop's and the sampler's, with their innermost project frame."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    return [f"{names.get(ident, ident)}: {_project_frames(frame, 2)}" for ident, frame in sys._current_frames().items()
            if ident != me and names.get(ident) not in ("MainThread",)][:8]


def _record(entry: dict[str, Any]) -> None:
    TIMING.info("loop %s %.3f s %s", entry["kind"], entry["took_s"], entry.get("callback", ""))
    if _state.get("path"):
        try:
            with _lock, open(_state["path"], "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError:  # a log that cannot be written never breaks the loop
            pass
