"""Fewer, cheaper cyclic-GC passes while a capture runs (its forward, and the assembly of its trace).

A capture allocates a few small records per op that live as long as the trace; with the default
threshold (700) the collector would walk them every couple of hundred ops, and inside deeply nested
module calls each pass costs more. Three settings, restored afterwards (also when the forward raises):

- the young generation is collected about 70x less often (cycles are still collected, only later). Every
  young pass during a capture walks records that all survive it. Measured paired against 7,000 on
  2026-12-01: 50,000 took 3-5% off a 10,000-op capture, 3-12% off a 100,000-op one and 6-15% off a
  30,000-op capture with values; 100,000 and 200,000 were no better than 50,000. An 8B weights-free capture
  (about 7,000 new objects) then has no young pass at all (one pass of 1.5 ms before);
- the objects alive when the capture starts (the model, torch, the interpreter's own) are frozen
  (`gc.freeze`): a full collection triggered by the growing trace then walks only what the forward
  made, instead of the whole heap again and again (what made the per-op cost grow with trace
  length). Skipped when the process has frozen objects of its own, which unfreezing would release;
- at the end, what the capture made is moved with them to the oldest generation (frozen, then
  unfrozen) rather than left young: the trace lives on, and walking it in young and middle passes
  right after the capture (the next forward's cost) would find nothing to free. The next full
  collection walks it, as it would have anyway. `assembling()` builds the trace with the GC paused
  and makes that move before the GC resumes (a freeze also clears the young generation's count): the
  young pass the build's allocations had made due (0.6 ms of GPT-2 small's capture, walking about
  8,000 new objects) no longer runs.

`tracer.trace` holds the setting from the forward until the trace is sealed. The move at the end,
measured with a 100,000 threshold against the old setting (issue 18, paired captures in one process):
about 4 ms off an 8B weights-free capture and 1-3 ms off GPT-2 small's, nothing moved onto the next
forward. Nested and concurrent captures share one setting: the first to enter applies it, the last to
leave restores what it found.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 50_000  # objects allocated between young-generation passes (CPython's default: 700)

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()
_froze = False


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the young-generation threshold to YOUNG_THRESHOLD (never lower it) and freeze the heap for the block."""
    global _depth, _saved, _froze
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if _saved[0] and _saved[0] < YOUNG_THRESHOLD:
                gc.set_threshold(YOUNG_THRESHOLD, *_saved[1:])
            _froze = gc.get_freeze_count() == 0
            if _froze:
                gc.freeze()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _settle()
                gc.set_threshold(*_saved)


@contextmanager
def assembling() -> Iterator[None]:
    """The end of a capture under `fewer_collections`: the block runs with the cyclic GC paused, and when it
    finishes inside the outermost capture, what the capture made moves to the oldest generation before the
    GC resumes (so no young pass is due at that moment)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        with _lock:
            if _depth == 1:
                _settle()
    finally:
        if enabled:
            gc.enable()


def _settle() -> None:
    """Move what the capture made to the oldest generation, once (callers hold `_lock`)."""
    global _froze
    if _froze:
        gc.freeze()  # what the capture made joins the heap frozen at the start ...
        gc.unfreeze()  # ... and all of it returns to the oldest generation
        _froze = False
