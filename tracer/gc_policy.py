"""The cyclic GC policy for building many small acyclic records (saving, loading, exporting, sealing).

`gc_paused()` pauses the cyclic collector for a block and restores what it found: building a million
small acyclic objects otherwise triggers it over and over, and reference counting frees them all the
same. A capture's own policy (a higher young threshold and a frozen heap) is
`tracer.capture.collector`.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for the block (nested blocks keep it paused; the outermost restores it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
