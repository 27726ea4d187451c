"""Saving a trace folder atomically: write a sibling temporary folder, then swap it in with a rename.

Killed mid-write, the previous trace at the target is untouched (the half-written sibling is removed
by the next save to that target); a failure removes the temporary folder. The target must be new,
an empty folder or an earlier trace folder: nothing else is ever replaced or deleted.
"""
from __future__ import annotations

import ctypes
import errno
import gzip
import os
import shutil
import tempfile
from pathlib import Path

from ..atomic_write import fsync_path as _fsync
from ..errors import TraceSaveFailedError, TraceSavePathError
from ..ir import Trace
from ..gc_policy import gc_paused
from .codec import encode_body
from .document import frame
from .files import as_path
from .format import GRADS_FILE, STRUCTURE_FILE, STRUCTURE_FILE_GZ, TRACE_FILES, VALUES_FILE
from .backward import write_grads
from .values import write_values

_TEMP_MARK = ".saving-"


def save_trace(trace: Trace, path: str | Path, *, compress: bool = False) -> Path:
    """Write `trace` as folder `path` (trace.json, or trace.json.gz with `compress`, + values); returns it."""
    folder = _target(as_path(path, "Trace.save", TraceSavePathError))
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceSavePathError(f"cannot create the folder {folder.parent} ({exc.strerror or exc})",
                                 site=str(folder)) from None
    _check_replaceable(folder)
    _remove_stale_temporaries(folder)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_TEMP_MARK}{os.getpid()}-", dir=folder.parent))
    except OSError as exc:
        raise TraceSaveFailedError(f"cannot write in {folder.parent} ({exc.strerror or exc})", site=str(folder)) from None
    try:
        with gc_paused():
            _write(trace, tmp, compress)
        _swap_in(tmp, folder)
    except OSError as exc:
        raise TraceSaveFailedError(f"saving to {folder} failed ({exc.strerror or exc}); nothing was changed there",
                                   site=str(folder)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the new files were moved out, or the old folder was swapped in
    return folder


def _target(path: Path) -> Path:
    """The folder to write: `path`, or its parent when `path` names trace.json itself."""
    if path.name in (STRUCTURE_FILE, STRUCTURE_FILE_GZ):
        return path.parent
    if path.suffix in (".json", ".gz", ".safetensors", ".zip"):
        raise TraceSavePathError(f"{path} names a file; a trace is saved as a folder", site=str(path),
                                 remedy=f"Pass a folder path, e.g. {str(path.with_suffix(''))!r}.")
    if path.name in ("", ".", ".."):
        raise TraceSavePathError(f"{str(path)!r} is not a folder name to save into", site=str(path))
    return path


def _check_replaceable(folder: Path) -> None:
    """Refuse a target that exists and is not a folder holding only trace files (or nothing)."""
    if folder.is_symlink() or (os.path.lexists(folder) and not folder.is_dir()):
        raise TraceSavePathError(f"{folder} exists and is not a folder", site=str(folder))
    if not folder.exists():
        return
    try:
        names = set(os.listdir(folder))
    except OSError as exc:
        raise TraceSavePathError(f"{folder} cannot be listed ({exc.strerror or exc})", site=str(folder)) from None
    foreign = sorted(names - TRACE_FILES)
    if foreign or (names and not names & {STRUCTURE_FILE, STRUCTURE_FILE_GZ}):
        shown = ", ".join(foreign[:5]) if foreign else ", ".join(sorted(names))
        raise TraceSavePathError(f"{folder} holds files that are not a trace ({shown}); it is left alone",
                                 site=str(folder), remedy="Save into a new or empty folder.")


def _write(trace: Trace, tmp: Path, compress: bool) -> None:
    values_digest = write_values(trace.values, tmp / VALUES_FILE) if trace.values else None
    grads = write_grads(trace.backward, tmp / GRADS_FILE) if trace.backward is not None else None
    doc = frame(encode_body(trace, grads), values_digest)
    if compress:
        with gzip.open(tmp / STRUCTURE_FILE_GZ, "wb", compresslevel=1) as fh:
            fh.write(doc)
    else:
        (tmp / STRUCTURE_FILE).write_bytes(doc)
    for name in os.listdir(tmp):
        _fsync(tmp / name)
    _fsync(tmp)


def _swap_in(tmp: Path, folder: Path) -> None:
    """Make `tmp` the folder `folder`; an existing folder ends up at `tmp` (removed by the caller)."""
    if not folder.exists():
        os.rename(tmp, folder)
    elif not _exchange(tmp, folder):
        aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_TEMP_MARK}{os.getpid()}-old-", dir=folder.parent))
        os.rename(folder, aside / "old")
        os.rename(tmp, folder)
        os.rename(aside / "old", tmp)
        aside.rmdir()
    _fsync(folder.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where that is unavailable."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove temporary folders that a killed save to this target left behind (their process is gone)."""
    prefix = f".{folder.name}{_TEMP_MARK}"
    try:
        names = [n for n in os.listdir(folder.parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder.parent / name, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True

