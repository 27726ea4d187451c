"""The app's own temporary folders: made here, removed when their session ends and at exit.

Nothing outside a folder made here is ever removed by the app.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_live: set[Path] = set()


def make(prefix: str) -> Path:
    """A fresh private folder (mode 0700) under the system temp folder, removed at exit at the latest."""
    folder = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    with _lock:
        _live.add(folder)
    return folder


def remove(folder: Path) -> None:
    """Remove `folder` if this module made it; any other path is left alone."""
    folder = Path(folder).resolve()
    with _lock:
        if folder not in _live:
            return
        _live.discard(folder)
    shutil.rmtree(folder, ignore_errors=True)


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
    """Remove every folder made here (called at interpreter exit)."""
    for folder in live():
        remove(folder)
