"""The explorer's start-up work on a background thread, in named stages a page can show.

`Startup(load, stages)` runs `load(step)` on its own thread (`start()`); `load` calls `step(key)` as it
enters each stage (`STAGE_TEXT` says what a key means) and returns the `Loaded` source, or raises. The
finished outcome stays: every page opened later reuses it. `snapshot()` is a consistent copy for a
page to draw; `wait()` blocks until the work is done. A refusal is kept as the typed error it was; any
other exception is kept as well, and `exit_code()` tells the command what to return (2 for a refusal,
1 for a bug, 0 when it loaded). The clock is injectable, so tests can order events without timing.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tracer.errors import TracerError

STAGE_TEXT = {
    "import": "importing torch, transformers and the tracer",
    "import-tracer": "importing torch and the tracer",
    "cache": "reading the default's capture from the start-up cache (made by an earlier launch)",
    "model": "building the model on the meta device (no weights)",
    "capture": "capturing the forward, structure only",
    "factory": "building your model and capturing its forward",
    "read": "reading the saved trace",
    "layout": "laying out the graph",
}

# the stages each route goes through, in order (what the page lists before they are reached)
ROUTE_STAGES: dict[str, tuple[str, ...]] = {
    "config": ("import", "model", "capture", "layout"),
    "default-cached": ("import-tracer", "cache", "layout"),  # app.default_cache: an entry is there (checked on reading)
    "factory": ("import", "factory", "layout"),
    "trace-file": ("import", "read", "layout"),
    "mesh": ("import", "capture", "layout"),
}

Step = Callable[[str], None]


@dataclass(frozen=True)
class Snapshot:
    """What a page shows: the stages with their seconds (None: not reached), the current one, the outcome."""

    stages: tuple[tuple[str, float | None], ...]
    current: str | None
    elapsed_s: float
    done: bool
    loaded: Any = None
    error: BaseException | None = None
    events: tuple[str, ...] = field(default=())


class Startup:
    """One command's start-up: `load(step)` run once on a background thread, its stages and outcome kept."""

    def __init__(self, load: Callable[[Step], Any], stages: Sequence[str], *,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._load = load
        self._clock = clock
        self._planned = list(stages)
        self._entered: dict[str, float] = {}
        self._order: list[str] = []
        self._left: dict[str, float] = {}
        self._started = clock()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._loaded: Any = None
        self._error: BaseException | None = None
        self._events: list[str] = []
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the work on a daemon thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="tlx-startup", daemon=True)
        self._thread.start()

    def step(self, key: str) -> None:
        """Enter stage `key` (the one before it ends now)."""
        now = self._clock()
        with self._lock:
            if self._order:
                self._left.setdefault(self._order[-1], now)
            if key not in self._entered:
                self._entered[key] = now
                self._order.append(key)
            if key not in self._planned:
                self._planned.append(key)
            self._events.append(f"stage:{key}")

    def _run(self) -> None:
        try:
            outcome, error = self._load(self.step), None
        except BaseException as exc:  # kept for the page and the command, never lost on the thread
            outcome, error = None, exc
        now = self._clock()
        with self._lock:
            if self._order:
                self._left.setdefault(self._order[-1], now)
            self._loaded, self._error = outcome, error
            self._events.append("refused" if isinstance(error, TracerError) else "failed" if error else "ready")
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the work is done (True) or `timeout` passes (False)."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def loaded(self) -> Any:
        return self._loaded

    @property
    def error(self) -> BaseException | None:
        return self._error

    def exit_code(self) -> int:
        """0 loaded, 2 refused (a typed error), 1 failed otherwise or not finished."""
        if not self.done or (self._error is not None and not isinstance(self._error, TracerError)):
            return 1
        return 2 if self._error is not None else 0

    def snapshot(self) -> Snapshot:
        now = self._clock()
        with self._lock:
            stages = []
            for key in self._planned:
                if key in self._entered:
                    stages.append((key, self._left.get(key, now) - self._entered[key]))
                else:
                    stages.append((key, None))
            current = self._order[-1] if self._order and self._order[-1] not in self._left else None
            return Snapshot(tuple(stages), current, now - self._started, self._done.is_set(), self._loaded,
                            self._error, tuple(self._events))


def refusal_lines(exc: BaseException) -> list[str]:
    """The command's words for an outcome that is not a page: a refusal's code, site and remedy, or a bug's one line."""
    if isinstance(exc, TracerError):
        lines = [f"torchlens-explore: refused [{exc.code}]: {exc.message}"]
        if exc.site:
            lines.append(f"  at: {exc.site}")
        if exc.remedy:
            lines.append(f"  what to do: {exc.remedy}")
        return lines
    return [f"torchlens-explore: failed unexpectedly ({type(exc).__name__}: {exc}); please report this"]
