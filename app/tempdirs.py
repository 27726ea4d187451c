"""The app's own temporary folders: made here, removed when their session ends and at exit.

Nothing outside a folder made here is ever removed by the app.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_lock = threading.Lock()
_live: set[Path] = set()
_closed = False  # set at exit: a thread still running then (a daemon) makes no folder that would outlive it
_writers = 0  # threads inside `writing()`: the exit waits for them (at most WRITERS_WAIT_S) before removing
_writers_done = threading.Condition(_lock)
WRITERS_WAIT_S = 10.0


def make(prefix: str) -> Path:
    """A fresh private folder (mode 0700) under the system temp folder, removed at exit at the latest.

    Refused (`shutting_down`) once the exit's clean-up has begun."""
    with _lock:
        if _closed:
            from .errors import ShuttingDownError

            raise ShuttingDownError(f"no new {prefix}* folder: the process is exiting", site="tempdirs.make")
        folder = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        _live.add(folder)
    return folder


def remove(folder: Path) -> None:
    """Remove `folder` if this module made it; any other path is left alone."""
    folder = Path(folder).resolve()
    with _lock:
        if folder not in _live:
            return
        _live.discard(folder)
    for _ in range(20):  # a thread still writing into it (the Export tab's Model Explorer files at exit) can add a
        shutil.rmtree(folder, ignore_errors=True)  # file between rmtree's listing and its rmdir: try again
        if not folder.exists():
            break
        time.sleep(0.05)


@contextmanager
def writing(folder: Path) -> Iterator[Path]:
    """Write into `folder` on a thread the exit may overtake: refused (`shutting_down`) once the exit's clean-up
    has begun, and that clean-up waits for the block to end (at most `WRITERS_WAIT_S`) before it removes the
    folders. A daemon thread stopped mid-write by the interpreter's end would otherwise leave the folder that
    its atomic writes made again (they make their parent folder)."""
    global _writers
    with _lock:
        if _closed:
            closed = True
        else:
            closed, _writers = False, _writers + 1
    if closed:
        _refuse_closed(folder)
    try:
        yield folder
    finally:
        with _lock:
            _writers -= 1
            closed = _closed
            _writers_done.notify_all()
    if closed:  # the exit began while the files were written: none is left behind
        _refuse_closed(folder)


def _refuse_closed(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    from .errors import ShuttingDownError

    raise ShuttingDownError(f"{Path(folder).name} was removed: the process is exiting", site="tempdirs.writing")


def inside(folder: Path, name: str) -> Path:
    """`folder / name` for a plain file name; refuses anything that would leave `folder`."""
    from tracer.errors import InvalidInputError

    target = (Path(folder) / name).resolve()
    if "/" in name or "\\" in name or name in ("", ".", "..") or target.parent != Path(folder).resolve():
        raise InvalidInputError(f"file name {name!r} would leave the session folder", site="export",
                                remedy="Export names are derived from the model class; this is a bug if you see it.")
    return target


def live() -> list[Path]:
    """Folders made here and not yet removed."""
    with _lock:
        return sorted(_live)


@atexit.register
def remove_all() -> None:
    """Remove every folder made here and refuse new ones (called at interpreter exit)."""
    global _closed
    with _lock:
        _closed = True
        _writers_done.wait_for(lambda: _writers == 0, timeout=WRITERS_WAIT_S)
    for folder in live():
        remove(folder)
