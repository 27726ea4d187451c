"""One session's layouts off the server's event loop (issue 39, fair sessions).

A layout is pure Python, so a worker thread holds the GIL while it runs; CPython still hands the GIL to
the loop thread within its switch interval (5 ms), so other sessions' callbacks run between the layout's
slices. Measured with tests/bench/bench_offloop.py (the dense-edge trace expanded whole, a 10 ms ticker
on the loop, load 5-7 on 2 cores): inline, the loop stalled 0.7-1.7 s; in a thread, tick lateness p90
10 ms (max 135-249 ms); in `app.worker`'s child process, 10-13 s per layout (the child loads the trace
and builds its engine cold) and then 0.8-2 s on the loop to parse the 14 MB JSON result. So a thread.

`OffLoop` runs one job at a time per session: a newer `submit` (or `supersede`) stops the job in flight
(`Stopped` is raised in its thread at its next bytecode) and its result, should one still arrive, is
dropped on the loop (the generation check is made there, where results are applied). A job past its
bound is stopped the same way and `over` is called instead of `done`. `done`, `over` and `failed` run
through `deliver`: for a served session, the document's next tick under its lock (`served_deliverer`).
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

LAYOUT_BOUND_S = 10.0  # a layout still running after this is stopped and the view stays as it was

Deliver = Callable[[Callable[[], None]], None]


class Stopped(BaseException):
    """Raised inside a job's thread when a newer request supersedes it or it ran past its bound (a
    BaseException, so that no `except Exception` in the work swallows it)."""


@dataclass
class _Job:
    gen: int
    thread: threading.Thread | None = None
    finished: bool = False
    reason: str = ""  # why it was stopped: "superseded" or "bound"
    timer: threading.Timer | None = field(default=None, repr=False)


class OffLoop:
    """At most one background job per owner (a session); the newest request wins."""

    def __init__(self, bound_s: float | None = None, name: str = "tlx-layout") -> None:
        self.bound_s = LAYOUT_BOUND_S if bound_s is None else bound_s
        self.name = name
        self.dropped = 0  # results that arrived after a newer request (counted on the loop)
        self._gen = 0
        self._job: _Job | None = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """Whether a job is in flight whose result would still be applied."""
        job = self._job
        return job is not None and job.gen == self._gen and not job.finished

    def submit(self, work: Callable[[], Any], done: Callable[[Any, float], None], over: Callable[[float], None],
               failed: Callable[[BaseException], None], deliver: Deliver) -> int:
        """Run `work()` on a new thread, stopping the job before it; deliver `done(result, seconds)`, or
        `over(seconds)` past the bound, or `failed(error)`, unless a newer request came first."""
        with self._lock:
            self._gen += 1
            job = _Job(self._gen)
            self._stop(self._job, "superseded")
            self._job = job
        job.thread = threading.Thread(target=self._body, args=(job, work, done, over, failed, deliver),
                                      name=f"{self.name}-{job.gen}", daemon=True)
        job.timer = threading.Timer(self.bound_s, self._overdue, (job,))
        job.timer.daemon = True
        job.thread.start()
        job.timer.start()
        return job.gen

    def supersede(self) -> None:
        """A newer view was drawn another way (inline, or refused): drop and stop whatever is in flight."""
        with self._lock:
            self._gen += 1
            self._stop(self._job, "superseded")

    def join(self, timeout: float | None = None) -> None:
        """Wait until the latest job's thread has ended (its outcome handed to `deliver`)."""
        job = self._job
        if job is not None and job.thread is not None:
            job.thread.join(timeout)

    def _overdue(self, job: _Job) -> None:
        with self._lock:
            if job.gen == self._gen:
                self._stop(job, "bound")

    def _stop(self, job: _Job | None, reason: str) -> None:
        """Raise `Stopped` in `job`'s thread (the lock is held: the job has not finished)."""
        if job is None or job.finished or job.reason or job.thread is None or job.thread.ident is None:
            return
        job.reason = reason
        if job.timer is not None:
            job.timer.cancel()
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(job.thread.ident), ctypes.py_object(Stopped))

    def _body(self, job: _Job, work: Callable[[], Any], done: Callable[[Any, float], None],
              over: Callable[[float], None], failed: Callable[[BaseException], None], deliver: Deliver) -> None:
        started = time.perf_counter()
        try:
            try:
                result = work()
                with self._lock:  # a stop sent before this fires by the end of this block, in this try
                    job.finished = True
                    if job.timer is not None:
                        job.timer.cancel()
                took = time.perf_counter() - started
                deliver(lambda: self._apply(job, lambda: done(result, took)))
            except Stopped:
                with self._lock:
                    job.finished = True
                if job.reason == "bound":
                    took = time.perf_counter() - started
                    deliver(lambda: self._apply(job, lambda: over(took)))
            except Exception as exc:  # noqa: BLE001 - the work's refusal, shown on the page
                with self._lock:
                    job.finished = True
                    if job.timer is not None:
                        job.timer.cancel()
                error = exc
                deliver(lambda: self._apply(job, lambda: failed(error)))
        except Stopped:  # sent while the job was already handing over: it was finished, nothing more to do
            pass

    def _apply(self, job: _Job, fn: Callable[[], None]) -> None:
        """On the loop: apply a job's outcome unless a newer request came after it."""
        if job.gen != self._gen:
            self.dropped += 1
            return
        fn()


def served_deliverer() -> Deliver | None:
    """How to hand a result back to the current served session (its document's next tick, under its
    lock); None outside a served session (tests, notebooks, the MCP server), where work runs inline."""
    try:
        import panel as pn

        from .views.docsync import call_on_document, is_served
    except ImportError:  # no Panel: never served
        return None
    doc = pn.state.curdoc
    if not is_served(doc):
        return None
    return lambda fn: call_on_document(doc, fn)
