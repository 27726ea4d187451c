"""The server's heap kept cheap to collect.

Panel runs a full `gc.collect()` on the server's event loop when a session closes, and Python runs
full collections on its own as objects pile up; either walks every object alive, and after loading a
model (torch, transformers, the trace) that is about half a million objects: 1-2 s on a busy 2-core
machine, during which no session gets an answer. Objects alive once the server has loaded its trace
live as long as the server, so they are moved out of the collector's reach.
"""
from __future__ import annotations

import gc


def freeze_long_lived() -> int:
    """Collect once, then exempt every object alive now from later collections; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
