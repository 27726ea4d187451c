"""One session's layouts off the server's event loop (issue 39, fair sessions).

A layout is pure Python, so a worker thread holds the GIL while it runs; CPython still hands the GIL to
the loop thread within its switch interval (5 ms), so other sessions' callbacks run between the layout's
slices. Measured once with a scratch script (the dense-edge trace expanded whole, a 10 ms ticker on the
loop, load 5-7 on 2 cores; tests/bench/bench_offloop.py measures the same three ways, with app.worker as
the child, and has not been run yet): inline, the loop stalled 0.7-1.7 s; in a thread, tick lateness p90
10 ms (max 135-249 ms); in a plain child process, 10-13 s per layout (it loads the trace and builds its
engine cold) and then 0.8-2 s on the loop to parse the 14 MB JSON result. So a thread.

`OffLoop` runs one job at a time per session, on that session's one thread (starting a thread per job
had the loop wait for it to be scheduled: seen in the loop log under load); a newer `submit` (or `supersede`) stops the job in flight
(`Stopped` is raised in its thread at its next bytecode) and its result, should one still arrive, is
dropped on the loop (the generation check is made there, where results are applied). A job past its
bound is stopped the same way and `over` is called instead of `done`. `done`, `over` and `failed` run
through `deliver`: for a served session, the document's next tick under its lock (`deliverer`).
"""
from __future__ import annotations

import ctypes
import heapq
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

LAYOUT_BOUND_S = 10.0  # a layout still running after this is stopped and the view stays as it was
IDLE_S = 120.0  # an owner's thread with no job for this long ends

Deliver = Callable[[Callable[[], None]], None]
LOG = logging.getLogger(__name__)


class Stopped(BaseException):
    """Raised inside a job's thread when a newer request supersedes it or it ran past its bound (a
    BaseException, so that no `except Exception` in the work swallows it)."""


@dataclass
class _Job:
    gen: int
    work: Callable[[], Any]
    done: Callable[[Any, float], None]
    over: Callable[[float], None]
    failed: Callable[[BaseException], None]
    deliver: Deliver
    finished: bool = False
    reason: str = ""  # why it was stopped: "superseded" or "bound"
    ended: threading.Event = field(default_factory=threading.Event, repr=False)


class OffLoop:
    """At most one background job per owner (a session), on a thread of its own started once (a thread
    started per job would have the loop wait for it to be scheduled); the newest request wins."""

    def __init__(self, bound_s: float | None = None, name: str = "tlx-layout") -> None:
        self.bound_s = LAYOUT_BOUND_S if bound_s is None else bound_s
        self.name = name
        self.dropped = 0  # results that arrived after a newer request (counted on the loop)
        self._gen = 0
        self._job: _Job | None = None  # the latest job (waiting, running or ended)
        self._running: _Job | None = None
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> bool:
        """Whether a job is in flight whose result would still be applied."""
        job = self._job
        return job is not None and job.gen == self._gen and not job.finished

    def submit(self, work: Callable[[], Any], done: Callable[[Any, float], None], over: Callable[[float], None],
               failed: Callable[[BaseException], None], deliver: Deliver) -> int:
        """Run `work()` on this owner's thread, stopping the job before it; deliver `done(result, seconds)`,
        or `over(seconds)` past the bound, or `failed(error)`, unless a newer request came first."""
        with self._lock:
            self._gen += 1
            self._stop(self._running, "superseded")
            if self._job is not None and self._job is not self._running:
                self._job.finished = True  # waiting, never started: replaced
                self._job.ended.set()
            job = self._job = _Job(self._gen, work, done, over, failed, deliver)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()  # once per owner (again after it idled out)
            self._lock.notify_all()
        return job.gen

    def supersede(self) -> None:
        """A newer view was drawn another way (inline, or refused): drop and stop whatever is in flight."""
        with self._lock:
            self._gen += 1
            self._stop(self._running, "superseded")

    def join(self, timeout: float | None = None) -> None:
        """Wait until the latest job has ended (its outcome handed to `deliver`)."""
        job = self._job
        if job is not None:
            job.ended.wait(timeout)

    def _overdue(self, job: _Job) -> None:
        with self._lock:
            if job.gen == self._gen and job is self._running:
                self._stop(job, "bound")

    def _stop(self, job: _Job | None, reason: str) -> None:
        """Raise `Stopped` in the thread running `job` (the lock is held: the job has not finished)."""
        if job is None or job.finished or job.reason or self._thread is None or self._thread.ident is None:
            return
        job.reason = reason
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident), ctypes.py_object(Stopped))

    def _serve(self) -> None:
        try:
            self._serve_jobs()
        finally:  # idle, or an error no job caught: the next `submit` starts a thread again, never waits on a dead one
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _serve_jobs(self) -> None:
        while True:
            job: _Job | None = None
            try:
                with self._lock:
                    while self._job is None or self._job.finished:
                        if not self._lock.wait(IDLE_S) and (self._job is None or self._job.finished):
                            return  # idle: ends (a closed session keeps no thread); `submit` starts another
                    job = self._job
                    self._running = job  # from here a stop may be sent
                WATCHDOG.watch(self.bound_s, lambda job=job: self._overdue(job))
                self._run(job)
            except Stopped:  # sent before the job began, or as it was handing over: it is over either way
                if job is not None:
                    with self._lock:
                        job.finished = True
                        if self._running is job:
                            self._running = None
                    job.ended.set()

    def _run(self, job: _Job) -> None:
        started = time.perf_counter()
        try:
            result = job.work()
            with self._lock:  # a stop sent before this fires by the end of this block, in this try
                job.finished = True
                self._running = None
            took = time.perf_counter() - started
            self._hand_over(job, lambda: job.done(result, took))
        except Stopped:
            with self._lock:
                job.finished = True
                self._running = None
            if job.reason == "bound":
                took = time.perf_counter() - started
                self._hand_over(job, lambda: job.over(took))
        except Exception as exc:  # noqa: BLE001 - the work's refusal, shown on the page
            with self._lock:
                job.finished = True
                self._running = None
            error = exc  # `exc` itself is unbound when this block ends, before the loop runs the outcome
            self._hand_over(job, lambda: job.failed(error))
        finally:
            job.ended.set()

    def _hand_over(self, job: _Job, outcome: Callable[[], None]) -> None:
        """Give `outcome` to the job's session; a hand-over that fails (a session gone) is logged, and this
        owner's thread goes on serving the next request instead of dying with it."""
        try:
            job.deliver(lambda: self._apply(job, outcome))
        except Exception:  # noqa: BLE001 - nothing to show it on; the next request lays out again
            LOG.exception("a background layout's outcome could not be handed to its session")

    def _apply(self, job: _Job, fn: Callable[[], None]) -> None:
        """On the loop: apply a job's outcome unless a newer request came after it."""
        if job.gen != self._gen:
            self.dropped += 1
            return
        fn()


class _Watchdog:
    """One thread for every owner's bounds: calls each `fn` once its deadline has passed."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._count = 0

    def watch(self, seconds: float, fn: Callable[[], None]) -> None:
        with self._lock:
            self._count += 1
            heapq.heappush(self._due, (time.monotonic() + seconds, self._count, fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="tlx-layout-bounds", daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._lock.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _at, _n, fn = heapq.heappop(self._due)
            fn()  # a stale entry (its job ended) does nothing


WATCHDOG = _Watchdog()


def deliverer(doc: Any) -> Deliver | None:
    """How to hand a result back to the served session of `doc` (its next tick, under its lock); None outside
    a served session (tests, notebooks, the MCP server), where work runs inline."""
    if doc is None:
        return None
    from .views.docsync import call_on_document, is_served

    if not is_served(doc):
        return None
    return lambda fn: call_on_document(doc, fn)
