"""Fewer, cheaper cyclic-GC passes while a capture runs (its forward, and the assembly of its trace).

A capture allocates a few small records per op; with the default threshold (700) the collector
runs every couple of hundred ops, and inside deeply nested module calls each pass costs more. Two
settings, both restored afterwards (also when the forward raises):

- the young generation is collected 10x less often (cycles are still collected, only later);
- the objects alive when the capture starts (the model, torch, the interpreter's own) are frozen
  (`gc.freeze`): a full collection triggered by the growing trace then walks only what the forward
  made, instead of the whole heap again and again (what made the per-op cost grow with trace
  length). Skipped when the process has frozen objects of its own, which unfreezing would release.

`tracer.trace` holds the setting from the forward until the trace is sealed, so the collections that
its records, ops and claim table trigger stay young-generation passes over what the capture made
(an 8B weights-free capture: 24 collections, two of them middle-generation, 8.8 ms -> 6 young ones, 4.8 ms).
Nested and concurrent captures share one setting: the first to enter applies it, the last to leave
restores what it found.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 7000  # objects allocated between young-generation passes (CPython's default: 700)

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
                if _froze:
                    gc.unfreeze()
                    _froze = False
                gc.set_threshold(*_saved)
