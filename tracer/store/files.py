"""File access for trace folders: the folder of a path, regular files that stay inside it, bounded reads."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..bounded_io import ReadErrors, inflate_capped, open_regular, read_fd_capped

from ..errors import StoreError, TraceFileCorruptError, TraceFileNotFoundError, TraceFileUnsafeError, TraceLimitError
from .format import MAX_STRUCTURE_BYTES, STRUCTURE_FILE, STRUCTURE_FILE_GZ

STORE_READ_ERRORS = ReadErrors(too_large=TraceLimitError, not_regular=TraceFileUnsafeError,
                               unreadable=TraceFileCorruptError)


def as_path(path: object, what: str, error: type[StoreError] = TraceFileNotFoundError) -> Path:
    """`path` as a Path, refusing (with `error`) what is not a path at all (None, numbers, NUL bytes)."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str) or "\x00" in text:
        raise error(f"{what} needs a folder path, got {type(path).__name__}", site=repr(path)[:200],
                    remedy="Pass a folder path as a str or Path.")
    return Path(path)


def trace_folder(path: Path) -> Path:
    """The folder holding the trace: `path` itself, or its parent when `path` names a structure file."""
    if path.name in (STRUCTURE_FILE, STRUCTURE_FILE_GZ) and not _is_dir(path):
        return path.parent
    return path


def structure_file(folder: Path) -> Path:
    """The folder's one structure file (plain or gzip), refusing a folder that has none or both."""
    found = [folder / name for name in (STRUCTURE_FILE, STRUCTURE_FILE_GZ) if _exists(folder / name)]
    if not found:
        raise TraceFileNotFoundError(f"no {STRUCTURE_FILE} at {folder}", site=str(folder),
                                     remedy="Pass the folder written by trace.save(path).")
    if len(found) > 1:
        raise TraceFileCorruptError(f"{folder} holds both {STRUCTURE_FILE} and {STRUCTURE_FILE_GZ}", site=str(folder))
    return found[0]


def checked_file(folder: Path, path: Path) -> Path:
    """`path` when it is a regular file inside `folder` (a symlink may point only within the folder)."""
    try:
        real = Path(os.path.realpath(path))
        inside = real.parent == Path(os.path.realpath(folder))
        mode = os.stat(real).st_mode
    except (OSError, ValueError, RuntimeError) as exc:
        raise TraceFileUnsafeError(f"{path} cannot be opened ({exc.__class__.__name__})", site=str(path)) from None
    if not inside:
        raise TraceFileUnsafeError(f"{path} is a link that leaves the trace folder (to {real})", site=str(path))
    if not stat.S_ISREG(mode):
        raise TraceFileUnsafeError(f"{path} is not a regular file", site=str(path))
    return real


def read_structure(path: Path) -> bytes:
    """The structure file's bytes (gunzipped for `.gz`), refusing more than MAX_STRUCTURE_BYTES (and a
    `.gz` that inflates far past its compressed size) after bounded work, and anything not a regular file."""
    fd = open_regular(path, STORE_READ_ERRORS)
    try:
        if path.name.endswith(".gz"):
            return inflate_capped(fd, MAX_STRUCTURE_BYTES, path, STORE_READ_ERRORS)
        return read_fd_capped(fd, MAX_STRUCTURE_BYTES, path, STORE_READ_ERRORS)
    finally:
        os.close(fd)


def _exists(path: Path) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False
