"""Bounded reads of untrusted files: regular files only, an explicit byte cap, inflation and digests in streaming.

Every reader of a user-supplied file (configs, trace folders, overlays, diffs) goes through here:

- `open_regular` opens without blocking (`O_NONBLOCK`: a FIFO returns at once) and refuses, from the
  opened descriptor, anything that is not a regular file (FIFOs, devices, sockets, links to them);
- `read_capped` reads at most `cap + 1` bytes, whatever `st_size` says (`/proc` files report 0, a
  file may grow), and refuses more than `cap`;
- `inflate_capped` stream-decompresses gzip with a ceiling on the output and on its ratio to the
  compressed bytes read, so a small bomb is refused after a bounded amount of work;
- `sha256_fd` digests a file in fixed-size blocks, so a digest is checked before a whole file is held.

Refusals are typed; a caller names the classes its layer uses (`ReadErrors`), e.g. the store's.
"""
from __future__ import annotations

import hashlib
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path

from .errors import InputNotRegularFileError, InputTooLargeError, InputUnreadableError, TracerError

BLOCK = 1 << 20  # bytes read (or inflated) per step
INFLATE_RATIO = 100  # gzip of a trace's JSON runs ~8-12x; a bomb runs ~1000x
INFLATE_FLOOR = 16 << 20  # any file may inflate to this much, whatever its ratio


@dataclass(frozen=True)
class ReadErrors:
    """The typed refusals a caller's layer raises (each is called as `cls(message, site=...)`)."""

    too_large: type[TracerError] = InputTooLargeError
    not_regular: type[TracerError] = InputNotRegularFileError
    unreadable: type[TracerError] = InputUnreadableError


DEFAULT = ReadErrors()


def open_regular(path: str | os.PathLike, errors: ReadErrors = DEFAULT, site: str | None = None) -> int:
    """A read-only descriptor of `path` when it is a regular file (links followed), refused typed otherwise."""
    where = site or str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # refuse a device before opening it at all
            raise errors.not_regular(f"{path} is not a regular file (a FIFO, device, socket or folder)", site=where)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except TracerError:
        raise
    except (OSError, ValueError) as exc:
        raise errors.unreadable(f"{path} cannot be opened ({getattr(exc, 'strerror', None) or exc})",
                                site=where) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # it changed between the check and the open
            raise errors.not_regular(f"{path} is not a regular file", site=where)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: str | os.PathLike, cap: int, errors: ReadErrors = DEFAULT, site: str | None = None,
                what: str = "") -> bytearray:
    """The bytes of regular file `path`, refused typed when there are more than `cap`."""
    fd = open_regular(path, errors, site)
    try:
        return read_fd_capped(fd, cap, path, errors, site, what)
    finally:
        os.close(fd)


def read_fd_capped(fd: int, cap: int, path: str | os.PathLike, errors: ReadErrors = DEFAULT,
                   site: str | None = None, what: str = "") -> bytearray:
    """At most `cap` bytes from `fd` (from where it stands); refused typed when the file holds more."""
    where = site or str(path)
    try:
        hint = max(0, os.fstat(fd).st_size)
        buf = bytearray(min(hint, cap) + 1)  # the size is a hint only: one byte more shows a file over the cap
        view, n = memoryview(buf), 0
        while True:
            if n == len(buf):
                if n > cap:
                    break
                view.release()
                buf.extend(bytes(min(BLOCK, cap + 1 - n)))
                view = memoryview(buf)
            got = os.readv(fd, [view[n:]])
            if not got:
                break
            n += got
        view.release()
    except MemoryError:
        raise errors.too_large(f"{what or path} does not fit in memory", site=where) from None
    except OSError as exc:
        raise errors.unreadable(f"{path} cannot be read ({exc.strerror or exc})", site=where) from None
    if n > cap:
        raise errors.too_large(f"{what or path} is larger than {cap:,} bytes", site=where)
    del buf[n:]
    return buf


def inflate_capped(fd: int, cap: int, path: str | os.PathLike, errors: ReadErrors = DEFAULT,
                   site: str | None = None, ratio: int = INFLATE_RATIO) -> bytearray:
    """The gunzipped bytes of `fd` (every gzip member), refused typed past `cap` bytes or past `ratio`
    times the compressed bytes read (after INFLATE_FLOOR); corrupt data is refused as `unreadable`."""
    where = site or str(path)
    out = bytearray()
    read = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    started = False
    try:
        while True:
            chunk = os.read(fd, BLOCK)
            if not chunk:
                break
            read += len(chunk)
            pending = chunk
            while True:
                if inflater.eof:
                    pending = pending.lstrip(b"\x00")  # gzip allows zero padding after the last member
                    if not pending:
                        break
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # a next gzip member
                started = True
                ceiling = min(cap, max(INFLATE_FLOOR, ratio * read))
                produced = inflater.decompress(pending, min(BLOCK, ceiling + 1 - len(out)))  # one block at a time
                out += produced
                if len(out) > ceiling:
                    raise errors.too_large(
                        f"{path} inflates past {ceiling:,} bytes ({'the cap' if ceiling == cap else f'{ratio}x its compressed size'})",
                        site=where)
                pending = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                if not pending and (inflater.eof or not produced):
                    break  # this chunk is used up (output still held inside zlib comes with the next call)
    except zlib.error as exc:
        raise errors.unreadable(f"{path} is not valid gzip ({exc})", site=where) from None
    except OSError as exc:
        raise errors.unreadable(f"{path} cannot be read ({exc.strerror or exc})", site=where) from None
    except MemoryError:
        raise errors.too_large(f"{path} does not fit in memory once inflated", site=where) from None
    if not started or not inflater.eof:
        raise errors.unreadable(f"{path} is truncated gzip (it ends inside a compressed stream)", site=where)
    return out


def sha256_fd(fd: int, path: str | os.PathLike, errors: ReadErrors = DEFAULT, site: str | None = None,
              limit: int | None = None) -> tuple[str, int]:
    """(hex SHA-256, bytes read) of `fd` from its start, read in BLOCK steps; refused past `limit` bytes."""
    hasher, total = hashlib.sha256(), 0
    block = bytearray(BLOCK)
    view = memoryview(block)
    try:
        offset = 0
        while True:
            got = os.preadv(fd, [view], offset)
            if not got:
                break
            hasher.update(view[:got])
            offset += got
            total += got
            if limit is not None and total > limit:
                raise errors.too_large(f"{path} holds more than {limit:,} bytes", site=site or str(path))
    except OSError as exc:
        raise errors.unreadable(f"{path} cannot be read ({exc.strerror or exc})", site=site or str(path)) from None
    finally:
        view.release()
    return hasher.hexdigest(), total


def is_regular(path: Path) -> bool:
    """True when `path` (links followed) is a regular file; False for anything else or an error."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
