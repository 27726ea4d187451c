"""Fewer cyclic-GC passes while a capture runs: the young generation is collected 10x less often.

A capture allocates a few small records per op; with the default threshold (700) the collector
runs every couple of hundred ops, and inside deeply nested module calls each pass costs more.
Cycles are still collected, only later. Nested and concurrent captures share one setting: the
first to enter raises the threshold, the last to leave restores what it found.
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


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the young-generation threshold to YOUNG_THRESHOLD (never lower it) for the block."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if _saved[0] and _saved[0] < YOUNG_THRESHOLD:
                gc.set_threshold(YOUNG_THRESHOLD, *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
