"""Saving and loading a diff: one JSON file with a format tag, a schema version and a SHA-256 digest.

No pickle. A load checks the file (regular, bounded), the header, the digest of the body's canonical
JSON, every record's type and bounds (msgspec, unknown fields refused) and the references between
records; anything else is refused with a typed `StoreError`. Saving writes a sibling temporary file
and renames it over the target.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from ..digest import canonical_digest
from ..errors import (DiffFileCorruptError, DiffFileNotFoundError, DiffFileTamperedError, DiffSavePathError,
                      DiffSchemaError, TracerError)
from .records import plain
from .result import TraceDiff

FORMAT = "torchlens-explore.diff"
SCHEMA_VERSION = 1
MAX_DIFF_BYTES = 1 << 30


class _Header(msgspec.Struct):
    format: Any = None
    schema_version: Any = None
    digest: Any = None
    diff: Any = None


def save_diff(diff: TraceDiff, path: str | Path) -> Path:
    """Write `diff` as the JSON file `path` (atomically); returns the path."""
    target = _path(path, DiffSavePathError)
    if target.suffix != ".json":
        raise DiffSavePathError(f"{target} does not end in .json", site=str(target))
    if os.path.lexists(target) and not _is_diff_file(target):
        raise DiffSavePathError(f"{target} exists and is not a saved diff; it is left alone", site=str(target))
    body = plain(diff)
    document = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "digest": canonical_digest(body), "diff": body}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.saving-", dir=target.parent)
    except OSError as exc:
        raise DiffSavePathError(f"cannot write in {target.parent} ({exc.strerror or exc})", site=str(target)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(msgspec.json.encode(document))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise DiffSavePathError(f"saving to {target} failed ({exc.strerror or exc}); nothing was changed there",
                                site=str(target)) from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return target


def load_diff(path: str | Path) -> TraceDiff:
    """Load and verify a diff saved with `TraceDiff.save`; anything invalid is refused typed."""
    source = _path(path, DiffFileNotFoundError)
    site = str(source)
    raw = _read(source)
    try:
        header = msgspec.json.decode(raw, type=_Header)
    except msgspec.ValidationError:
        raise DiffSchemaError(f"{site} is not a torchlens-explore diff", site=site) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise DiffFileCorruptError(f"{site} is not valid JSON ({exc})", site=site) from None
    if header.format != FORMAT:
        raise DiffSchemaError(f"{site} is not a torchlens-explore diff", site=site)
    if type(header.schema_version) is not int or header.schema_version != SCHEMA_VERSION:
        raise DiffSchemaError(f"diff schema version {header.schema_version!r} is not supported (this build reads "
                              f"{SCHEMA_VERSION})", site=site)
    try:
        digest = canonical_digest(header.diff)
    except (ValueError, TypeError, RecursionError) as exc:
        raise DiffFileCorruptError(f"{site} has an unreadable body ({exc.__class__.__name__})", site=site) from None
    if not isinstance(header.digest, str) or digest != header.digest:
        raise DiffFileTamperedError(f"{site} does not match its digest", site=site)
    try:
        diff = msgspec.convert(header.diff, TraceDiff)
    except msgspec.ValidationError as exc:
        raise DiffFileCorruptError(f"{site}: a record is malformed ({exc})", site=site) from None
    _check_references(diff, site)
    return diff


def _check_references(diff: TraceDiff, site: str) -> None:
    """Labels are unique per side, module children and roll-up outputs refer to what the file holds."""
    labels_a = [a for a, _ in diff.pairs]
    labels_b = [b for _, b in diff.pairs]
    if len(set(labels_a)) != len(labels_a) or len(set(labels_b)) != len(labels_b):
        raise DiffFileCorruptError(f"{site}: an op is matched twice", site=f"{site}: pairs")
    matched = dict(diff.pairs)
    for div in diff.divergences:
        if matched.get(div.label_a) != div.label_b:
            raise DiffFileCorruptError(f"{site}: divergence of {div.label_a!r} names no matched pair",
                                       site=f"{site}: divergences")
    for address, entry in diff.modules.items():
        if entry.address != address or entry.status not in ("matched", "added", "removed"):
            raise DiffFileCorruptError(f"{site}: module {address!r} is malformed", site=f"{site}: modules")
        for child in entry.children:
            if child not in diff.modules:
                raise DiffFileCorruptError(f"{site}: module {address!r} names a missing child {child!r}",
                                           site=f"{site}: modules")


def _path(path: object, error: type) -> Path:
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\x00" in text:
        raise error(f"a diff file needs a path, got {type(path).__name__}", site=repr(path)[:200])
    return Path(text)


def _read(path: Path) -> bytes:
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        raise DiffFileNotFoundError(f"no diff file at {path}", site=str(path)) from None
    if not stat.S_ISREG(mode):
        raise DiffFileCorruptError(f"{path} is not a regular file", site=str(path))
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_DIFF_BYTES + 1)
    except OSError as exc:
        raise DiffFileCorruptError(f"{path} cannot be read ({exc.strerror or exc})", site=str(path)) from None
    if len(data) > MAX_DIFF_BYTES:
        raise DiffFileCorruptError(f"{path} is larger than {MAX_DIFF_BYTES:,} bytes", site=str(path))
    return data


def _is_diff_file(path: Path) -> bool:
    from ..bounded_io import open_regular

    try:
        fd = open_regular(path)  # a FIFO or device is not a diff file (and is never opened for reading)
    except TracerError:
        return False
    try:
        head = os.read(fd, 64)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head.startswith(b'{"format":' + msgspec.json.encode(FORMAT))
