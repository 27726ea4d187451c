"""The digest of each C extension's sources: setup.py embeds it in the extension at build time
(`-DTLX_SOURCE_DIGEST=...`, read back as the module's `SOURCE_DIGEST`) and `kernel/native.py` recomputes it from
the sources beside the package, so an editable install whose `.so` is older than its `.c` is noticed.

Standard library only: setup.py loads this file by path, before the package (and torch) can be imported.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

# Each extension's sources, relative to tracer/capture/ (setup.py builds exactly these).
SOURCES: dict[str, tuple[str, ...]] = {
    "_walk": ("_walk.c",),                        # before the forward
    "_hotpath": ("_hotpath.c", "_slots.h"),       # during it
    "_assembly": ("_assembly.c", "_slots.h"),     # after it
}
MACRO = "TLX_SOURCE_DIGEST"


def digest(folder: Path, name: str) -> str | None:
    """The sha256 of extension `name`'s sources in `folder` (each file's name and bytes, in order), or None
    where one is missing (an installed wheel carries no sources)."""
    h = hashlib.sha256()
    for source in SOURCES[name]:
        try:
            data = (folder / source).read_bytes()
        except OSError:
            return None
        h.update(source.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
