"""Files written so that a failure never destroys the old one: a temporary file beside it, then a rename.

`write_atomic` writes the bytes (or whatever `fill(fh)` writes) to a temporary file in the target's
folder, flushes and fsyncs it, renames it over the target (`os.replace`) and fsyncs the folder, as
`tracer.store.save` does for trace folders. Any failure (a full disk, a file-size limit) removes the
temporary file and leaves the target as it was. A target that is a symbolic link is refused unless
`follow_symlinks`, which writes the link's final target instead (the link itself is kept).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, BinaryIO

from .errors import OutputPathUnsafeError, TracerError

TEMP_MARK = ".writing-"


def fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or folder by path (a folder's fsync makes a rename in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resolve_target(path: str | os.PathLike, *, follow_symlinks: bool = False, site: str | None = None) -> Path:
    """The file to replace: `path`, refused typed when it is a link (unless `follow_symlinks`: its target)
    or exists as something other than a regular file."""
    target = Path(path)
    where = site or str(target)
    if target.is_symlink():
        if not follow_symlinks:
            raise OutputPathUnsafeError(f"{target} is a symbolic link (to {os.readlink(target)}); it is not followed",
                                        site=where)
        target = Path(os.path.realpath(target))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError:
        return target  # the write itself says what is wrong
    if not stat.S_ISREG(mode):
        raise OutputPathUnsafeError(f"{target} exists and is not a regular file; it is left alone", site=where,
                                    remedy="Pass the path of a new or existing regular file.")
    return target


def write_atomic(path: str | os.PathLike, data: bytes | bytearray | memoryview | Callable[[BinaryIO], None], *,
                 error: type[TracerError], follow_symlinks: bool = False, site: str | None = None,
                 what: str = "the file") -> Path:
    """Write `data` (or let `data(fh)` write) as `path`, atomically; returns the path written.

    A failure raises `error` (the caller's typed refusal) with the old file untouched; a link is
    refused with `OutputPathUnsafeError` unless `follow_symlinks`.
    """
    target = resolve_target(path, follow_symlinks=follow_symlinks, site=site)
    where = site or str(target)
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}{TEMP_MARK}", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), _mode_for(target))
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        tmp = None
        fsync_path(target.parent)
    except OSError as exc:
        raise error(f"cannot write {what} {target} ({exc.strerror or exc}); nothing was changed there",
                    site=where) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return Path(path) if not follow_symlinks else target


def _mode_for(target: Path) -> int:
    """The permission bits the new file gets: the old file's, else what a plain open would give (umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read without changing it (Linux /proc), else the common 022."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
