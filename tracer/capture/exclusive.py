"""One capture per model at a time: module scopes (forward wrappers, hooks) are per module, not per thread.

A second capture of a model (or of a module inside it) while another thread captures it
would run both sessions' scopes in both forwards and attribute ops to the wrong capture,
silently. The second one is refused, typed, before anything is installed.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from torch import nn

from ..errors import ConcurrentCaptureError

_LOCK = threading.Lock()
_BUSY: dict[int, int] = {}  # id(module) -> the thread capturing it (modules are alive while held)


@contextlib.contextmanager
def exclusive_capture(model: nn.Module, walked: list[tuple[str, nn.Module]]) -> Iterator[None]:
    """Hold every module of `model` for this capture; refuse when another capture holds one."""
    ids = {id(m) for _name, m in walked}
    with _LOCK:
        taken = next(((name, _BUSY[id(m)]) for name, m in walked if id(m) in _BUSY), None)
        if taken is not None:
            name, thread = taken
            raise ConcurrentCaptureError(
                f"{type(model).__name__} is already being captured (thread {thread}); a second capture of the "
                f"same modules at the same time would mix both captures' module attribution",
                site=f"module '{name}'" if name else f"model {type(model).__name__}", thread=thread)
        me = threading.get_ident()
        for i in ids:
            _BUSY[i] = me
    try:
        yield
    finally:
        with _LOCK:
            for i in ids:
                _BUSY.pop(i, None)
